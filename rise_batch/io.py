"""Writing files so that a reader, or a run resumed after a kill, never sees half of one; and superseding a run.

Every output of the project that a resumed run trusts (checkpoint parts, done markers, manifests, trajectories,
judgments, structured documents, batch files) is written to a temporary name in the same directory and renamed into
place: a rename within one file system is atomic, so the file is either the old one, the new one, or absent. The
temporary name is hidden, carries the process id and a random part and is created exclusively without following a
link, so two processes writing the same path (a resubmitted shard, a re-run while a killed worker's write was still
in flight) never write into each other's temporary file, a symlink planted at a predictable name never redirects a
write, and a leftover of a kill is `.<name>.<pid>.<random>.tmp`, where `CheckpointStore.clean_temporaries` finds it.

Serialization stays with the caller's format: job files (manifest, stats, batches.json) are indented and sorted
(`dump_json`), run-directory files keep their non-ASCII text readable (`write_json_atomic`'s defaults), done markers
are one sorted line. The bytes each file has always had are part of the outputs' contract.

Pure stdlib at import (and `storage`, which is too); pyarrow is imported only by `write_parquet_atomic` and for
object storage (`storage.ObjectPath`), whose files are written once under their final name instead.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

from rise_batch.safe_read import RefusedFile, open_regular, read_json_file, read_regular_file  # noqa: F401 (their old home)
from rise_batch.storage import ObjectPath, location, move


def _create_temporary(path: Path) -> tuple[int, Path]:
    """A new, empty temporary file beside `path`, opened for writing: `.<name>.<pid>.<random>.tmp`.

    Created with O_CREAT | O_EXCL | O_NOFOLLOW, so a name planted in the directory beforehand (a symlink aimed at a
    file elsewhere, for the next process ids) is never written through: the call fails on it and another random
    name is drawn. The mode is 0666 less the umask, as `open(..., "w")` gives."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"cannot create a temporary file beside {path}: 100 names taken (a hostile directory?)")


def _write_via(path: Path, write: Callable[[BinaryIO], object]) -> None:
    fd, tmp = _create_temporary(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)  # replaces a symlink at `path` itself, never its target
    except BaseException:  # a failed or interrupted write leaves neither a partial file nor a stray temporary
        tmp.unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: str | Path | ObjectPath, data: bytes) -> None:
    """`data` as the whole content of `path`, appearing at once (object storage: one PUT under the final name)."""
    loc = location(path)
    if isinstance(loc, ObjectPath):
        loc.write_bytes(data)
        return
    _write_via(loc, lambda fh: fh.write(data))


def write_parts_atomic(path: str | Path, parts: Iterable[Any]) -> None:
    """Bytes-like `parts` (bytes, memoryviews, contiguous numpy arrays) written in order as the content of a local
    `path`, appearing at once, without joining them into one copy first (a 1M-document string table is ~100 MB)."""
    _write_via(Path(path), lambda fh: [fh.write(memoryview(p).cast("B")) for p in parts])


def write_text_atomic(path: str | Path | ObjectPath, text: str) -> None:
    """`text` as UTF-8, byte for byte (no newline translation: a document's `\\r\\n` stays `\\r\\n`)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(
    path: str | Path | ObjectPath,
    obj: Any,
    *,
    indent: int | None = 1,
    sort_keys: bool = False,
    ensure_ascii: bool = False,
    default: Callable[[Any], Any] | None = None,
) -> None:
    """JSON into `path`, creating its directory. The defaults are the run directory's format (run.json,
    trajectories, judgments, reports): one-space indent, text kept readable; other files pass their own."""
    path = location(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(obj, indent=indent, sort_keys=sort_keys, ensure_ascii=ensure_ascii, default=default)
    write_text_atomic(path, text)


def dump_json(obj: object, path: str | Path | ObjectPath) -> None:
    """A job file (manifest.json, stats.json, batches.json): indented, sorted, anything else as str()."""
    write_json_atomic(path, obj, indent=2, sort_keys=True, ensure_ascii=True, default=str)


JSON_FILE_MAX_BYTES = 256 << 20  # a job or run file read whole (a trajectory of 300 calls is a few MB)


def read_json(path: str | Path | ObjectPath) -> Any:
    """The counterpart of the writers above (UTF-8 whatever the locale). A local file is opened as every file the
    engine reads (safe_read: below its own directory, no link followed, a regular file, at most
    JSON_FILE_MAX_BYTES), so a FIFO or a link to /dev/zero planted in a run directory is refused at once, naming it;
    a file that is not JSON is a ValueError naming it too."""
    loc = location(path)
    if isinstance(loc, ObjectPath):
        return json.loads(loc.read_text(encoding="utf-8"))
    return read_json_file(loc, below=loc.parent, max_bytes=JSON_FILE_MAX_BYTES)


def write_parquet_atomic(path: str | Path | ObjectPath, table: Any) -> None:
    """A pyarrow Table as a Parquet file (pyarrow's default writer settings), appearing at once. In object storage
    the file is made in memory first and put in one PUT: a failed write never leaves a short object."""
    import pyarrow.parquet as pq

    loc = location(path)
    if isinstance(loc, ObjectPath):
        import pyarrow as pa

        buf = pa.BufferOutputStream()
        pq.write_table(table, buf)
        loc.write_bytes(buf.getvalue().to_pybytes())
        return
    _write_via(loc, lambda fh: pq.write_table(table, fh))


def supersede(out: str | Path | ObjectPath, names: Iterable[str]) -> Path | ObjectPath:
    """Move a run's outputs `names` (those present) under `out/superseded-<time>/` and return that directory.

    A new run in an old run's directory keeps the old outputs instead of deleting them: they were paid for.
    """
    out = location(out)
    dest = out / f"superseded-{time.strftime('%Y%m%d-%H%M%S')}"
    if isinstance(out, ObjectPath):  # no rename: each object copied under the new prefix, then deleted
        for name in names:
            for obj, _ in [(out / name, 0)] if (out / name).is_file() else (out / name).list(recursive=True):
                move(obj, dest / str(obj.relative_to(out)))
        return dest
    dest.mkdir()
    for name in names:
        if (out / name).exists():
            shutil.move(str(out / name), str(dest / name))
    return dest


_CREATED: list[Path] = []  # output directories make_output_dir created in this process (see remove_unused_outputs)


def make_output_dir(path: str | Path | ObjectPath) -> Path | ObjectPath:
    """`mkdir -p` for a command's output directory, remembering the topmost directory it creates, so that a command
    that fails before writing anything removes it again (`errors.run_main`): a typo then leaves no empty directory
    that looks like a run to resume. Object storage has no directories: nothing to make or remove."""
    p = location(path)
    if isinstance(p, ObjectPath):
        return p
    top = None
    for d in (p, *p.parents):
        if d.exists():
            break
        top = d
    p.mkdir(parents=True, exist_ok=True)
    if top is not None:
        _CREATED.append(top)
    return p


def remove_unused_outputs() -> list[Path]:
    """Remove the directories `make_output_dir` created whose whole tree holds no data (only directories and empty
    files), and forget them all; returns what was removed. Anything with a byte in it stays."""
    removed = []
    while _CREATED:
        top = _CREATED.pop()
        files = [f for f in top.rglob("*") if not f.is_dir()] if top.is_dir() else [top]
        if top.is_dir() and all(f.is_file() and f.stat().st_size == 0 for f in files):
            shutil.rmtree(top, ignore_errors=True)
            removed.append(top)
    return removed
