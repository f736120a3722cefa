"""A mount point below DOCS reaches nothing: documents are opened with RESOLVE_NO_XDEV (or, without openat2, each
component's st_dev and mount id compared), and the sandbox never binds a directory with a mount point below it.

Real bind mounts (the tests run as root; skipped where `mount --bind` is not allowed), undone in `finally`.
Before the fix (main at 2ce0c40): with `corpus/evil2` a bind mount of a 0600 directory and `corpus/etcx` one of
/etc, the secret showed in the preview, `read` and `bash`, and was copied into the workspace as a 0444 file.
"""

# ruff: noqa: F811 - the fixtures imported from test_hostile_docs are the tests' arguments
from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rise_batch.space import safe_open
from rise_batch.space.docstore import DocStore
from rise_batch.space.sandbox import Sandbox
from rise_batch.space.tools import RetrievalTools, RiseTools, read_in
from rise_batch.space.workspace import Workspace
from tests.space.conftest import TEST_LIMITS
from tests.space.test_hostile_docs import (  # noqa: F401 - fixtures
    _fresh_notices,
    assert_nothing_of,
    docs,
    other_fs,
    resolver,
    secret,
    world,
)
from tests.space.test_unsafe_paths import craft_docmap


@contextmanager
def bind(source: Path, target: Path) -> Iterator[None]:
    if subprocess.run(["mount", "--bind", str(source), str(target)], capture_output=True).returncode != 0:
        pytest.skip("needs `mount --bind` (root in the initial mount namespace)")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


@pytest.mark.parametrize("mounted", ["private-dir", "etc"])
def test_a_bind_mounted_directory_below_docs_reaches_nothing(
    docs,
    world,
    secret,
    ws_root,
    other_fs,
    resolver,
    bwrap_ok,
    caplog,
    mounted,
):
    """`corpus/evil2` a bind mount of a 0600 directory holding the secret (or `corpus/etcx` one of /etc), and the
    victim's docmap row pointing into it: search, preview, read, bash, get_document show nothing of it, and no copy
    lands in a workspace on another file system."""
    _, _, index, victim, _ = world
    source, name, rel = (
        (secret.parent, "evil2", "evil2/shadow")
        if mounted == "private-dir"
        else (Path("/etc"), "etcx", "etcx/hostname")
    )
    os.chmod(secret.parent, 0o700)
    (docs / "corpus" / name).mkdir()
    craft_docmap(docs, victim, rel)
    host = Path(source / Path(rel).name).read_text()
    with bind(source, docs / "corpus" / name):
        store = DocStore(docs)
        for parent in (ws_root, other_fs):  # hardlinks, then copies
            ws = Workspace(parent / "ws", store)
            tools = RiseTools(index, ws, k=3, limits=TEST_LIMITS)
            with caplog.at_level(logging.WARNING):
                res = tools.search(["autism"])
            assert f"(docid {victim}: refused: its file {safe_open.THROUGH_LINK})" in res.text, res.text
            read = tools.read(rel)
            bash = tools.bash(f"cat {rel} 2>/dev/null; ls -A {name} 2>/dev/null; echo END")
            doc = RetrievalTools(index, store).get_document(victim)
            direct = read_in(store.docs, rel, 0, 5, store.docid)
            assert read.error and doc.error and direct.error
            assert bash.text.startswith("END"), bash.text
            assert_nothing_of(ws, victim, res.text, read.text, bash.text, doc.text, direct.text)
            if mounted == "etc":
                assert host.strip() not in res.text + read.text + bash.text + doc.text + direct.text
            tools.sandbox.close()
            ws.close()
        store.docs.close()


def test_a_file_bind_mounted_over_a_document_is_refused(docs, world, secret, ws_root, resolver):
    _, relpaths, index, victim, _ = world
    target = docs / "corpus" / relpaths[victim]
    with bind(secret, target):
        store = DocStore(docs)
        with pytest.raises(safe_open.NotADocument, match="mount point"):
            store.docs.open(relpaths[victim])
        ws = Workspace(ws_root / "ws", store)
        res = RiseTools(index, ws, k=3, limits=TEST_LIMITS).search(["autism"])
        assert f"(docid {victim}: refused" in res.text
        assert_nothing_of(ws, victim, res.text)
        ws.close()
        store.docs.close()


def test_a_sandbox_without_its_own_overlay_refuses_a_root_with_a_mount_below(ws_root, bwrap_ok):
    """bwrap binds recursively: outside the private overlay (a non-root user's sandbox), a mount point below the
    root would show what it holds. Such a root is refused (and a mount made after the sandbox started stops its
    next call); the overlay sandbox shows an empty directory."""
    (ws_root / "etcx").mkdir()
    (ws_root / "a.txt").write_text("hello\n")
    os.chmod(ws_root / "a.txt", 0o644)
    plain = Sandbox(ws_root, TEST_LIMITS, persistent=False)
    plain.isolated = False  # as for a non-root user: bwrap binds the root itself
    with bind(Path("/etc"), ws_root / "etcx"):
        res = plain.run("ls etcx | head -3; cat etcx/hostname")
        assert (
            res.exit_code == 126 and "has a mount point below it" in res.output and str(ws_root / "etcx") in res.output
        )
        if Sandbox(ws_root, TEST_LIMITS, persistent=False).isolated:
            shown = Sandbox(ws_root, TEST_LIMITS, persistent=False).run("ls -A etcx; echo END")
            assert shown.output.strip() == "END", shown.output
