"""Every file the engine reads, opened like a document: below its own directory, no link followed, regular only.

An index, a docs dir, a workspace or a run directory may be shared, so none of its files is trusted to be what its
name says. A FIFO in place of `params.index.json` would block the reader for good, a symlink to /dev/zero in place
of `docmap.parquet` would be read until the machine is out of memory, a symlink to a file elsewhere would be read
(or mapped) as if it were the index's own. So each file is opened with O_NONBLOCK (a FIFO opens at once instead of
waiting for a writer) and, below the directory that holds it, one component at a time with O_NOFOLLOW; the opened
descriptor's fstat must say "regular file" and its size must be within a bound taken from what the index or run
records (meta.json's counts) or a sane maximum; everything after uses that descriptor. Anything else is a
RefusedFile: one line naming the path and what it is, never a read, never a hang.

`read_regular_file` reads a small file whole; `map_regular` maps a large one (its pages shared between the
processes of a node, never read into memory); `read_json_file` and `load_npy` parse what they read, a damaged file
being a RefusedFile too.
"""

from __future__ import annotations

import errno
import io
import json
import mmap
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from rise_batch.storage import ObjectPath, arrow_source

JSON_MAX_BYTES = 64 << 20  # a small JSON file of an index or a run (meta.json, params.index.json)
NPY_HEADER_MAX = 1 << 16  # the most bytes a .npy header takes before its data
SOURCE_MAX_BYTES = 16 << 30  # a file read whole to derive a table from (docids.json, docmap.parquet)


class Recorded(NamedTuple):
    """A file's size as what wrote it recorded (an index's meta.json, a structure run's manifest.json): the bound it
    is read with, so a file grown or replaced since is refused before a byte of it is read."""

    size: int
    record: str  # the file that records it, named in the refusal


class RefusedFile(ValueError):
    """A file the engine will not read: not a regular file (a FIFO, a device, a directory), reached through a
    symbolic link where none may be, outside the directory it must be below, or over its size bound. A user error
    (a ValueError): the message is one line naming the path and why."""


def open_regular(path: str | Path, *, below: str | Path | None = None) -> BinaryIO:
    """`path` opened for reading in binary, if it is a regular file; otherwise RefusedFile (or FileNotFoundError).

    Opened with O_NONBLOCK, so a FIFO is refused at once instead of hanging the reader, and checked with fstat on
    the opened descriptor, so what is read is what was checked. With `below` (a directory the engine owns, such as a
    run directory), `path` must lie under it and every component after `below` is opened with O_NOFOLLOW, one at a
    time: a symbolic link anywhere below (to /dev/zero, to a file outside) is refused, not followed. `below` itself
    may be a link, as the user named it. (openat2's RESOLVE_BENEATH would do the walk in one call; Python has no
    binding for it, and a per-component walk costs microseconds on files read once.)"""
    path = Path(path)
    fd = _open_nofollow_below(path, Path(below)) if below is not None else _open_nonblocking(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RefusedFile(f"{path} is {_kind(st.st_mode)}, not a regular file: give the file itself")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_file(path: str | Path, *, below: str | Path | None = None, max_bytes: int) -> bytes:
    """The whole content of the regular file `path` (see `open_regular`), refused when over `max_bytes`: a run file
    or a query file is read whole, so its size is bounded before any byte is read (and after, should it grow)."""
    with open_regular(path, below=below) as fh:
        size = os.fstat(fh.fileno()).st_size
        data = fh.read(max_bytes + 1) if size <= max_bytes else b""
    if size > max_bytes or len(data) > max_bytes:
        raise _too_big(path, max_bytes)
    return data


def read_json_file(path: str | Path, *, below: str | Path | None = None, max_bytes: int = JSON_MAX_BYTES) -> Any:
    """`read_regular_file`, parsed as JSON; a file that is not JSON is a RefusedFile naming it."""
    data = read_regular_file(path, below=below, max_bytes=max_bytes)
    try:
        return json.loads(data)
    except ValueError as e:  # UnicodeDecodeError too
        raise RefusedFile(f"{path} is not valid JSON ({e}): rebuild it, or restore the file") from None


def map_regular(path: str | Path, *, below: str | Path | None = None, max_bytes: int | None = None) -> Any:
    """The regular file `path` mapped read-only (b"" when empty): its pages are read only when touched and shared
    with every process mapping the same file. The size is taken from the descriptor that was checked."""
    with open_regular(path, below=below) as fh:
        size = os.fstat(fh.fileno()).st_size
        if max_bytes is not None and size > max_bytes:
            raise _too_big(path, max_bytes)
        return mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ) if size else b""


def load_npy(path: str | Path, *, below: str | Path, length: int | None = None, ndim: int = 1) -> Any:
    """An `ndim`-D C-ordered array saved with `np.save`, memory-mapped from the checked file (as
    `np.load(mmap_mode="r")` does from a path): its header must describe a plain array whose bytes fill the rest of
    the file exactly, of `length` rows when the index records how many. Anything else is a RefusedFile naming it.
    A 1-D array of `length` items is refused before it is mapped when the file is larger than any such array can be
    (its header and `length` items of at most 16 bytes)."""
    import numpy as np

    bound = NPY_HEADER_MAX + 16 * length if length is not None and ndim == 1 else None
    buf = map_regular(path, below=below, max_bytes=bound)
    if not buf:
        raise RefusedFile(f"{path} is empty, not a .npy array: rebuild the index")
    try:
        head = io.BytesIO(buf[: min(len(buf), NPY_HEADER_MAX)])
        version = np.lib.format.read_magic(head)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(head)
        offset = head.tell()
    except ValueError as e:
        raise RefusedFile(f"{path} is not a .npy array ({e}): rebuild the index") from None
    n = int(np.prod(shape)) if shape else 1
    if dtype.hasobject or len(shape) != ndim or fortran or offset + n * dtype.itemsize != len(buf):
        raise RefusedFile(
            f"{path} is not a whole {ndim}-D array (shape {shape}, dtype {dtype}, {len(buf)} bytes): rebuild the index"
        )
    if length is not None and shape[0] != length:
        raise RefusedFile(f"{path} holds {shape[0]} items where the index records {length}: rebuild the index")
    return np.frombuffer(buf, dtype=dtype, count=n, offset=offset).reshape(shape)


def read_parquet(path: Any, columns: list[str] | None = None) -> Any:
    """A Parquet file as a pyarrow Table. A local one is opened as every file (below its directory, no link, a
    regular file) and read through that descriptor: a FIFO or a link to /dev/zero in place of a docmap or a
    checkpoint part is refused, naming it. An object in object storage is read through its filesystem."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(path, ObjectPath):
        where, fs = arrow_source(path)
        return pq.read_table(where, columns=columns, filesystem=fs)
    path = Path(path)
    with open_regular(path, below=path.parent) as fh:  # /proc/self/fd/N: the very file checked, read natively
        with pa.OSFile(f"/proc/self/fd/{fh.fileno()}") as f:
            return pq.read_table(f, columns=columns)


def check_size(path: str | Path, size: int, recorded: Recorded | None, max_bytes: int = SOURCE_MAX_BYTES) -> None:
    """Refuse a file about to be read whole whose size is not the one recorded for it (or, with no record, over
    `max_bytes`), in one line naming it and the record."""
    if recorded is not None and size != recorded.size:
        raise RefusedFile(
            f"{path} is {size:,} bytes where {recorded.record} records {recorded.size:,}: restore the file, or "
            "rebuild what wrote it"
        )
    if size > max_bytes:
        raise _too_big(path, max_bytes)


def _too_big(path: str | Path, max_bytes: int) -> RefusedFile:
    return RefusedFile(f"{path} is over {max_bytes} bytes, more than such a file can be: remove or replace it")


def _open_nonblocking(path: Path, extra: int, dir_fd: int | None = None) -> int:
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | extra, dir_fd=dir_fd)


def _open_nofollow_below(path: Path, below: Path) -> int:
    try:
        parts = path.relative_to(below).parts
    except ValueError:
        raise RefusedFile(f"{path} is not below {below}: only files inside it are read") from None
    if not parts or ".." in parts:
        raise RefusedFile(f"{path} is not a file below {below}: only files inside it are read")
    fd = os.open(below, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, name in enumerate(parts):
            last = i == len(parts) - 1
            where = below.joinpath(*parts[: i + 1])
            try:
                extra = os.O_NOFOLLOW if last else os.O_NOFOLLOW | os.O_DIRECTORY
                nxt = _open_nonblocking(Path(name), extra, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(where):
                    raise RefusedFile(
                        f"{where} is a symbolic link; files below {below} are read only as "
                        "themselves: replace the link with the file"
                    ) from None
                if e.errno == errno.ENOTDIR:
                    raise RefusedFile(f"{where} is not a directory") from None
                raise type(e)(e.errno, e.strerror, str(where)) from None
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "not a regular file"
