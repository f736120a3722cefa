"""A workspace's manifest.jsonl that this project did not write is refused in one line naming the file and the line,
never a traceback: each line must be exactly an arrival (docid, relpath, call, seq, time of their types).

Before the fix (main at 2ce0c40): `{"docid": 1}`, `[1,2]` and an extra key ended in TypeError tracebacks, and a
`not json` line gave a JSONDecodeError message without the file's name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rise_batch.space.docstore import DocStore
from rise_batch.space.manifest import MANIFEST, MARKER, read_manifest
from rise_batch.space.workspace import Workspace
from tests.conftest import REPO
from tests.space.conftest import make_docs

GOOD = {"docid": "d1", "relpath": "a/b.txt", "call": 0, "seq": 0, "time": 1.5}
BAD = {
    "docid-not-a-string": json.dumps({"docid": 1}),
    "a-list": "[1,2]",
    "an-extra-key": json.dumps({**GOOD, "extra": 1}),
    "a-missing-key": json.dumps({k: v for k, v in GOOD.items() if k != "seq"}),
    "a-bool-call": json.dumps({**GOOD, "call": True}),
    "not-json": "not json",
    "not-utf8": '{"docid": "\xff"}',
}


def _workspace(tmp_path: Path, line: str) -> Path:
    ws = tmp_path / "ws"
    (ws / "files").mkdir(parents=True)
    (ws / MARKER).write_text('{"made_by": "rise-batch", "version": 1}\n')  # the engine's own, but for the manifest
    (ws / MANIFEST).write_bytes((json.dumps(GOOD) + "\n" + line + "\n").encode("latin-1"))
    return ws


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_manifest_line_of_another_shape_is_refused_naming_the_file_and_line(tmp_path, case) -> None:
    ws = _workspace(tmp_path, BAD[case])
    with pytest.raises(ValueError, match=rf"{ws / MANIFEST}: line 2: .*not a workspace this project wrote"):
        read_manifest(ws)
    docs, _ = make_docs(tmp_path / "docs", 3)
    with pytest.raises(ValueError, match=rf"{ws / MANIFEST}: line 2"):
        Workspace(ws, DocStore(docs))


@pytest.mark.parametrize("case", ["docid-not-a-string", "a-list", "an-extra-key", "not-json"])
def test_workspace_info_on_a_foreign_manifest_exits_2_in_one_line(tmp_path, case) -> None:
    ws = _workspace(tmp_path, BAD[case])
    cmd = [sys.executable, "-m", "rise_batch.cli", "workspace", "info", str(ws)]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and f"{ws / MANIFEST}: line 2" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_a_manifest_that_is_a_fifo_or_a_link_is_refused_at_once(tmp_path) -> None:
    ws = tmp_path / "ws"
    (ws / "files").mkdir(parents=True)
    os.mkfifo(ws / MANIFEST)
    with pytest.raises(ValueError, match="is a FIFO"):
        read_manifest(ws)
    (ws / MANIFEST).unlink()
    (ws / MANIFEST).symlink_to("/dev/zero")
    with pytest.raises(ValueError, match="is a symbolic link"):
        read_manifest(ws)
