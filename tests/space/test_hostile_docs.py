"""A docs directory cannot reach outside itself: each attack from a shared, hostile docs dir goes through the real
tools (RISE search and its previews, `read`, sandboxed `bash`, the retrieval agent's search and `get_document`,
snippet-toc's search, the `rise-batch workspace search` command) over a real BM25 index, on a workspace on the
same file system (hardlinks) and on another one (copies: a tmpfs mounted for the test). The host file must never
reach a tool's output, a workspace or a log, no call may hang, and each refusal is one line naming the path.

Before the fix (main at 998e7ad): the preview printed the first line of a symlinked 0600 file, the copy fallback
handed all of it to `read` and bash, a symlinked directory component hardlinked the file itself, a FIFO hung every
tool, /dev/zero was read until MemoryError (or copied until the disk was full), and a file at the hardlink limit
failed the search with a traceback, leaving linked files without manifest lines.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rise_batch.space import safe_open
from rise_batch.space.docstore import DocStore
from rise_batch.space.manifest import read_manifest
from rise_batch.space.snippets import SnippetTocTools
from rise_batch.space.tools import RetrievalTools, RiseTools, read_in, search_into
from rise_batch.space.workspace import Workspace
from tests.conftest import REPO, sample_rows, write_jsonl
from tests.space.conftest import TEST_LIMITS, make_docs
from tests.space.test_unsafe_paths import craft_docmap

SECRET = "root:HOSTSECRET-h21:19000:0:99999:7:::"
HANG_S = 60  # only a hang fails this


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> tuple[Path, dict[str, str], object, str, Path]:
    """A docs dir template, its index, the docid `autism` retrieves first (the victim of each attack), the
    index's directory."""
    from rise_batch.index import build_index, load_index

    root = tmp_path_factory.mktemp("hostile")
    docs, relpaths = make_docs(root / "docs")
    write_jsonl(root / "corpus.jsonl", sample_rows(len(relpaths)))
    build_index(root / "corpus.jsonl", root / "index", workers=1)
    index = load_index(root / "index", backend="numpy")
    victim = index.search(["autism"], 1)[0].docids[0]
    return docs, relpaths, index, victim, root / "index"


@pytest.fixture
def docs(world, tmp_path) -> Path:
    """A fresh copy of the docs dir (world-traversable, as a shared corpus is) for one attack."""
    d = Path(tempfile.mkdtemp(prefix="rise-hostile-docs-"))
    os.chmod(d, 0o755)
    shutil.copytree(world[0], d / "docs")
    yield d / "docs"
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def secret(tmp_path) -> Path:
    """A root-only file outside the docs dir."""
    p = tmp_path / "outside" / "shadow"
    p.parent.mkdir()
    p.write_text(SECRET + "\nsecond line of the secret\n")
    os.chmod(p, 0o600)
    return p


@pytest.fixture
def other_fs() -> Iterator[Path]:
    """A directory on another file system than the docs (a tmpfs mounted for the test; /dev/shm if mounting is
    not allowed), world-traversable for the sandbox's unprivileged uid."""
    d = Path(tempfile.mkdtemp(prefix="rise-otherfs-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "none", str(d)]).returncode == 0
    if not mounted:
        os.rmdir(d)
        shm = Path("/dev/shm")
        if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tempfile.gettempdir()).st_dev:
            pytest.skip("needs a second file system: cannot mount a tmpfs, and /dev/shm is not one")
        d = Path(tempfile.mkdtemp(prefix="rise-otherfs-", dir=shm))
        os.chmod(d, 0o755)
    yield d
    if mounted:
        subprocess.run(["umount", "-l", str(d)], check=False)
        os.rmdir(d)
    else:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(params=["openat2", "per-component"])
def resolver(request, monkeypatch) -> str:
    """Both ways of opening without links: openat2, and one O_NOFOLLOW open per component (kernels without it)."""
    k = safe_open._kernel()
    monkeypatch.setattr(k, "openat2", None if request.param == "openat2" else False)
    if request.param == "openat2":
        fd = os.open("/", os.O_PATH)
        try:
            os.close(safe_open.open_path(fd, "etc"))
        finally:
            os.close(fd)
        if k.openat2 is False:
            pytest.skip("this kernel (or a seccomp filter) has no openat2")
    return request.param


@pytest.fixture(autouse=True)
def _fresh_notices(monkeypatch):
    from rise_batch.space import workspace

    monkeypatch.setattr(workspace, "_FALLBACK_NOTICES", set())
    monkeypatch.setattr(workspace, "_REFUSAL_NOTICES", set())


def within(fn: Callable[[], object], unblock: Path | None = None) -> object:
    """fn() in a thread; a call still running after HANG_S fails the test (a FIFO reader is then released)."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(HANG_S)
    if t.is_alive():
        if unblock is not None:  # a writer that closes at once: the blocked reader sees end of file
            os.close(os.open(unblock, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"hung for more than {HANG_S} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def ws_at(parent: Path, docs: Path) -> Workspace:
    return Workspace(parent / "ws", DocStore(docs))


def assert_nothing_of(ws: Workspace, victim: str, *texts: str) -> None:
    """The victim is not in the workspace (no link, no copy, no manifest line) and no text shows the secret."""
    assert victim not in ws and all(a.docid != victim for a in read_manifest(ws.path))
    for p in ws.files_dir.rglob("*"):
        if p.is_file():
            assert "HOSTSECRET" not in p.read_text(errors="replace"), p
    for t in texts:
        assert "HOSTSECRET" not in t and "second line of the secret" not in t


def test_symlink_to_a_root_only_file_is_refused_by_preview_read_and_bash(
    docs, world, secret, ws_root, other_fs, resolver, bwrap_ok, caplog
):
    _, relpaths, index, victim, _ = world
    rel = relpaths[victim]
    target = docs / "corpus" / rel
    target.unlink()
    target.symlink_to(secret)
    for parent in (ws_root, other_fs):  # hardlinks, then copies
        ws = ws_at(parent, docs)
        tools = RiseTools(index, ws, k=3, limits=TEST_LIMITS)
        with caplog.at_level(logging.WARNING):
            res = tools.search(["autism"])
        assert f"(docid {victim}: refused: its file is a symbolic link)" in res.text, res.text
        read = tools.read(rel)
        assert read.error and "no such file" in read.text
        bash = tools.bash(f"cat {rel} 2>/dev/null; find . -name '{os.path.basename(rel)}'; echo END")
        assert_nothing_of(ws, victim, res.text, read.text, bash.text, caplog.text)
        assert bash.text.startswith("END")  # not even a dangling link
        tools.sandbox.close()
        ws.close()
    refusals = [r.getMessage() for r in caplog.records if "symbolic link" in r.getMessage()]
    corpus = docs / "corpus"
    line = f"{corpus}/{rel}: is a symbolic link; only regular files below {corpus} are documents ({safe_open.REMEDY})"
    assert refusals == [line]


def test_cli_search_prints_no_host_file_and_one_line_naming_the_link(world, docs, secret, tmp_path):
    """The reported command: `rise-batch workspace search` over the docs dir with the symlinked document."""
    _, relpaths, _, victim, index_dir = world
    target = docs / "corpus" / relpaths[victim]
    target.unlink()
    target.symlink_to(secret)
    cmd = [sys.executable, "-m", "rise_batch.cli", "workspace", "search", "--index", str(index_dir)]
    cmd += ["--docs", str(docs), "--workspace", str(tmp_path / "ws"), "-k", "3", "autism"]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "HOSTSECRET" not in res.stdout + res.stderr
    assert f"(docid {victim}: refused: its file is a symbolic link)" in res.stdout
    warned = [line for line in res.stderr.splitlines() if "is a symbolic link" in line]
    assert len(warned) == 1 and str(target) in warned[0], res.stderr


def test_symlinked_directory_component_reaches_nothing(docs, world, secret, ws_root, resolver, caplog):
    """`DOCS/corpus/evil` -> a directory outside, and a docmap row `evil/shadow`: no link to the host file lands
    in the workspace, and neither the retrieval agent nor snippet-toc shows it."""
    _, _, index, victim, _ = world
    (docs / "corpus" / "evil").symlink_to(secret.parent)
    craft_docmap(docs, victim, "evil/shadow")
    store = DocStore(docs)
    with caplog.at_level(logging.WARNING):
        ws = Workspace(ws_root / "ws", store)
        res = search_into(index, ws, ["autism"], k=3)
        assert f"(docid {victim}: refused: its file {safe_open.THROUGH_LINK})" in res.text, res.text
        assert not (ws.files_dir / "evil").exists()
        retrieval = RetrievalTools(index, store)
        snip = retrieval.search("autism")
        doc = retrieval.get_document(victim)
        assert doc.error and "cannot be read" in doc.text
        toc = SnippetTocTools(index, store).search("autism")
        read = read_in(store.docs, "evil/shadow", 0, 5, store.docid)
        assert read.error
    assert_nothing_of(ws, victim, res.text, snip.text, doc.text, toc.text, read.text, caplog.text)
    ws.close()


def test_fifo_document_hangs_nothing(docs, world, ws_root, resolver):
    _, relpaths, index, victim, _ = world
    fifo = docs / "corpus" / relpaths[victim]
    fifo.unlink()
    os.mkfifo(fifo)
    store = DocStore(docs)
    ws = Workspace(ws_root / "ws", store)
    res = within(lambda: search_into(index, ws, ["autism"], k=3), fifo)
    assert f"(docid {victim}: refused: its file is a FIFO (named pipe))" in res.text, res.text
    retrieval = RetrievalTools(index, store)
    snip = within(lambda: retrieval.search("autism"), fifo)
    assert "(refused: the document's file is a FIFO (named pipe))" in snip.text
    doc = within(lambda: retrieval.get_document(victim), fifo)
    assert doc.error and "is a FIFO" in doc.text
    toc = within(lambda: SnippetTocTools(index, store).search("autism"), fifo)
    assert "no readable regular file" in toc.text
    read = within(lambda: read_in(store.docs, relpaths[victim], 0, 5, store.docid), fifo)
    assert read.error and "is a FIFO" in read.text
    assert_nothing_of(ws, victim)
    ws.close()


@pytest.mark.parametrize("how", ["symlink to /dev/zero", "device node"])
def test_character_device_is_neither_read_nor_copied(docs, world, ws_root, other_fs, how):
    _, relpaths, index, victim, _ = world
    dev = docs / "corpus" / relpaths[victim]
    dev.unlink()
    if how == "device node":
        try:
            os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # /dev/zero's numbers
        except PermissionError:
            pytest.skip("no CAP_MKNOD here")
    else:
        dev.symlink_to("/dev/zero")
    what = "is a symbolic link" if how.startswith("symlink") else "is a character device"
    store = DocStore(docs)
    for parent in (ws_root, other_fs):  # hardlinks, then copies: nothing is copied, no partial file is left
        ws = Workspace(parent / "ws", store)
        res = within(lambda ws=ws: search_into(index, ws, ["autism"], k=3))
        assert f"(docid {victim}: refused: its file {what})" in res.text, res.text
        assert not (ws.files_dir / relpaths[victim]).exists()
        assert_nothing_of(ws, victim)
        ws.close()
    doc = within(lambda: RetrievalTools(index, store).get_document(victim))
    assert doc.error and what in doc.text
    read = within(lambda: read_in(store.docs, relpaths[victim], 0, 5, store.docid))
    assert read.error and what in read.text


def _links_to_the_limit(path: Path, spare: Path, max_links: int = 70_000) -> bool:
    """Hardlink `path` into `spare` until the file system refuses (EMLINK): True when the limit was reached."""
    spare.mkdir()
    for i in range(max_links):
        try:
            os.link(path, spare / str(i))
        except OSError as e:
            if e.errno == errno.EMLINK:
                return True
            raise
    return False


def test_a_document_at_the_hardlink_limit_is_copied_and_every_file_gets_its_manifest_line(
    docs, world, ws_root, caplog, resolver
):
    """A real file at ext4's 65,000-link limit (made in ~3 s): it is copied, the others still hardlinked, one
    notice, and every file placed has its manifest line."""
    _, relpaths, index, victim, _ = world
    full = docs / "corpus" / relpaths[victim]
    if not _links_to_the_limit(full, docs.parent / "spare"):
        pytest.skip("this file system has no hardlink limit below 70,000")
    try:
        store = DocStore(docs)
        hits = index.search(["anarchism", "autism", "albedo"], 5)
        wanted = list(dict.fromkeys(d for h in hits for d in h.docids))
        assert victim in wanted[1:]  # documents are linked before it
        with caplog.at_level(logging.WARNING):
            ws = Workspace(ws_root / "ws", store)
            res = search_into(index, ws, ["anarchism", "autism", "albedo"], k=5)
            search_into(index, ws, ["autism"], k=5)  # another call: the notice is not repeated
        assert not res.error and set(ws.docids()) == set(wanted)
        placed = {p.relative_to(ws.files_dir).as_posix() for p in ws.files_dir.rglob("*.txt")}
        assert placed == {a.relpath for a in read_manifest(ws.path)} == {relpaths[d] for d in wanted}
        copy = ws.files_dir / relpaths[victim]
        assert copy.read_bytes() == full.read_bytes() and copy.stat().st_ino != full.stat().st_ino
        assert stat.S_IMODE(copy.stat().st_mode) == 0o444 and ws.copied == 1
        for d in wanted:
            if d != victim:
                assert (ws.files_dir / relpaths[d]).stat().st_ino == (docs / "corpus" / relpaths[d]).stat().st_ino
        notices = [r.getMessage() for r in caplog.records if "hardlink limit" in r.getMessage()]
        assert len(notices) == 1, caplog.text
        ws.close()
    finally:
        shutil.rmtree(docs.parent / "spare")


def test_a_full_disk_mid_search_leaves_no_partial_file_and_no_file_without_its_manifest_line(docs, world):
    """A workspace on a tiny tmpfs (copies): the disk fills half-way through a search. The call fails, but every
    file in the workspace is whole and has its manifest line, and no partial copy is left."""
    _, relpaths, _, _, _ = world
    page = os.sysconf("SC_PAGE_SIZE")
    sizes = [-(-(docs / "corpus" / rel).stat().st_size // page) * page for rel in relpaths.values()]
    room = sum(sizes[: len(sizes) // 2]) + 16 * page  # about half the documents, and the directories
    d = Path(tempfile.mkdtemp(prefix="rise-tinyfs-"))
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={room},mode=0755", "none", str(d)]).returncode != 0:
        os.rmdir(d)
        pytest.skip("cannot mount a tmpfs here")
    try:
        ws = Workspace(d / "ws", DocStore(docs))
        with pytest.raises(OSError) as e:
            ws.add(list(relpaths))
        assert e.value.errno == errno.ENOSPC
        manifest = {a.relpath for a in read_manifest(ws.path)}
        placed = {p.relative_to(ws.files_dir).as_posix() for p in ws.files_dir.rglob("*.txt")}
        assert manifest == placed and 0 < len(placed) < len(relpaths)
        for rel in placed:
            assert (ws.files_dir / rel).read_bytes() == (docs / "corpus" / rel).read_bytes()
        assert set(Workspace(d / "ws", DocStore(docs)).docids()) == set(ws.docids())  # reopens as it was
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)
        os.rmdir(d)


def test_links_are_made_from_the_checked_file_without_the_capability_too(docs, world, ws_root, monkeypatch):
    """Without CAP_DAC_READ_SEARCH (linkat's AT_EMPTY_PATH refused) the link goes through /proc/self/fd and is
    checked to be the same inode: the workspace holds the corpus's own inodes either way."""
    _, relpaths, _, _, _ = world
    monkeypatch.setattr(safe_open._kernel(), "empty_path", False)
    with Workspace(ws_root / "ws", DocStore(docs)) as ws:
        ws.add(list(relpaths))
        for rel in relpaths.values():
            assert (ws.files_dir / rel).stat().st_ino == (docs / "corpus" / rel).stat().st_ino


def test_a_corpus_dir_that_is_itself_a_symlink_is_refused(tmp_path, docs):
    (tmp_path / "d").mkdir()
    shutil.copy(docs / "docmap.parquet", tmp_path / "d" / "docmap.parquet")
    (tmp_path / "d" / "corpus").symlink_to(docs / "corpus")
    with pytest.raises(safe_open.UnsafeDirectory, match=r"corpus is a symbolic link; give the real directory"):
        DocStore(tmp_path / "d")
