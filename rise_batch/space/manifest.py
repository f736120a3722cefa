"""A workspace's own files beside the documents: its marker, its manifest of arrivals, and the checks that refuse
a directory the engine did not make. Search, bash, read and `rise-batch workspace` all go through these.

The manifest (docid -> which search call and when) lives next to files/, not in it, so the agent never greps it.
Every line read back is checked to be exactly an arrival, and its relpath to be safe to join below files/.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import NamedTuple

from rise_batch.corpus.docmap import check_relpath
from rise_batch.safe_read import open_regular
from rise_batch.space.safe_open import UnsafeDirectory, kind_of

FILES = "files"
MANIFEST = "manifest.jsonl"
MARKER = ".rise-batch-workspace"  # written when the engine creates a workspace: only such a directory is used
MARKER_TEXT = b'{"made_by": "rise-batch", "version": 1}\n'


class Arrival(NamedTuple):
    docid: str
    relpath: str
    call: int  # which search call brought it (0-based)
    seq: int  # arrival order within the workspace (0-based)
    time: float  # unix seconds


_NOT_OURS = "not a workspace this project wrote; delete it"
_ARRIVAL_TYPES = {"docid": (str,), "relpath": (str,), "call": (int,), "seq": (int,), "time": (int, float)}


def read_manifest(ws_dir: str | Path) -> list[Arrival]:
    """The arrivals recorded in WS/manifest.jsonl, opened as every file the engine reads (safe_read: below WS, no
    link, a regular file) and each line checked to be exactly an arrival: a line of another shape, or an unsafe
    relpath (it is joined below), refuses the workspace in one line naming the file and the line."""
    path = Path(ws_dir) / MANIFEST
    out: list[Arrival] = []
    with open_regular(path, below=ws_dir) as f:
        for n, raw in enumerate(f, 1):
            if raw.strip():
                out.append(_arrival(raw, f"{path}: line {n}"))
    return out


def check_workspace(ws_dir: str | Path) -> None:
    """Refuse (one line naming it) a directory the engine did not make as a workspace: no marker file, or a marker,
    manifest or files/ that is a link or not what it should be. Search, bash and read all ask this."""
    ws = Path(ws_dir)
    for name, want, what in (
        (MARKER, stat.S_ISREG, "file"),
        (MANIFEST, stat.S_ISREG, "file"),
        (FILES, stat.S_ISDIR, "directory"),
    ):
        try:
            mode = os.lstat(ws / name).st_mode
        except FileNotFoundError:
            if name == MARKER:
                raise UnsafeDirectory(
                    f"{ws} is not a workspace made by rise-batch (no {MARKER}); delete it, or give a new "
                    "path to `workspace search`, which creates one"
                ) from None
            raise UnsafeDirectory(f"{ws} is not a whole workspace (no {name}); delete it and search again") from None
        if not want(mode):
            raise UnsafeDirectory(
                f"{ws / name} {kind_of(mode)}, not a {what} the engine made; refusing this workspace (delete it and "
                "search again)"
            )


def _arrival(raw: bytes, where: str) -> Arrival:
    try:
        rec = json.loads(raw)
    except ValueError:  # UnicodeDecodeError too
        raise ValueError(f"{where}: not JSON; {_NOT_OURS}") from None
    ok = isinstance(rec, dict) and set(rec) == set(_ARRIVAL_TYPES)
    if not ok or any(type(rec[k]) not in t for k, t in _ARRIVAL_TYPES.items()):  # type(): a bool is no call number
        shown = repr(rec) if len(repr(rec)) <= 200 else repr(rec)[:200] + "..."
        raise ValueError(f"{where}: {shown} is not an arrival (docid, relpath, call, seq, time); {_NOT_OURS}")
    check_relpath(rec["relpath"], where, _NOT_OURS)
    return Arrival(**rec)
