"""Read-only string tables in memory-mapped files: strings every process of a node shares instead of holding.

At 1M documents each trajectory actor held the index's docid list and vocabulary and the docs' docid -> relpath map
as Python objects, ~1 GB of private memory per actor. A table file holds the same strings as UTF-8 in one blob with
offsets and, for a column looked up by value, a hash index (buckets of row numbers keyed by a CRC-32 of the bytes).
It is mapped read-only, so its pages sit once in the page cache, shared by every process that maps it, and a lookup
costs a hash, two or three reads of the mapping and one compare.

A table is derived from a source file (docids.json, vocab.index.json, docmap.parquet) and records the source's
stat and sha256. `derived_table` uses a table only while it matches its source (the same file, untouched since, or
else the same sha256) and otherwise derives it again, under an exclusive flock of the source so that the actors of
a node derive it once, written under a temporary name and renamed into place so that a reader never sees half a
table. Where the directory cannot take the file the table is built in memory: the same answers, not shared (a
warning says so).

Its stamp matching says the source is unchanged, not the table: so the table's header also records a sha256 of the
whole file, checked on every open (rise_batch/strtable_check.py), and a table whose bytes changed (two rows of equal
length swapped) is derived again, never answered from.

File: b"RBSTRTAB" + uint64 length of a JSON header + the header (with `digest`), padded to 64 bytes; then per
column its sections (offsets: uint64 [n+1], absolute file positions of each string's bytes; blob; for a hashed
column, bucket starts uint32 [2**bits + 1] and rows uint32 [n] ordered by bucket), each section 64-byte aligned.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import mmap
import os
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from rise_batch.io import write_parts_atomic
from rise_batch.safe_read import Recorded, check_size, map_regular, open_regular
from rise_batch.strtable_batch import Arrays, find_many, take_many
from rise_batch.strtable_check import (
    BLANK_DIGEST,
    DIGEST_KEY,
    MIX,
    check_column,
    check_digest,
    digest_field,
    digest_of,
    hash_bits,
)

log = logging.getLogger(__name__)

MAGIC = b"RBSTRTAB"
VERSION = 2  # 2: the header records the file's sha256 (a table of version 1 is derived again)
OLDER_VERSIONS = (1,)


class OlderTable(ValueError):
    """A table written by an earlier rise_batch in an older format: derived again, quietly (nothing is damaged)."""


_ALIGN = 64
_CHUNK = 1 << 16  # strings per step when iterating a column

V = TypeVar("V")
Columns = Mapping[str, tuple[Sequence[str], bool]]  # name -> (strings in row order, hashed for lookup by value)


def _encode(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


class StrColumn(Sequence[str]):
    """A column of a table: `col[i]`, `len`, iteration, and for a hashed column `find(s)` (row or None) and `in`."""

    def __init__(self, buf: Any, spec: dict, base: int) -> None:
        view = memoryview(buf)
        self.n = int(spec["n"])
        self._buf = buf  # an mmap (or bytes): slicing it gives bytes
        at, size = spec["offsets"]
        self._off = view[base + at : base + at + size].cast("Q")
        self._hashed = "hash" in spec
        self._np: Arrays | None = None
        if self._hashed:
            self._shift = 32 - int(spec["hash"]["bits"])
            at, size = spec["hash"]["starts"]
            self._starts = view[base + at : base + at + size].cast("I")
            at, size = spec["hash"]["rows"]
            self._rows = view[base + at : base + at + size].cast("I")

    def __len__(self) -> int:
        return self.n

    def _arrays(self) -> Arrays:
        """numpy views of this column (made once; no copy of the mapping)."""
        if self._np is None:
            import numpy as np

            data = np.frombuffer(self._buf, np.uint8)
            off = np.frombuffer(self._off, np.uint64)
            if self._hashed:
                starts, rows = np.frombuffer(self._starts, np.uint32), np.frombuffer(self._rows, np.uint32)
                self._np = Arrays(data, off, starts, rows, self._shift)
            else:
                self._np = Arrays(data, off, None, None, 0)
        return self._np

    def take_many(self, rows: Any) -> list[str]:
        """`take` in numpy (rows a sequence or an integer array, each in range): one gather and one decode for a
        search's thousands of hits, where `take` pays a slice and a decode each."""
        return take_many(self._arrays(), rows)

    def find_many(self, keys: Sequence[str]) -> Any:
        """`find` of every key at once (numpy int64 rows, -1 for a key not held); only on a hashed column."""
        return find_many(self._arrays(), keys, self.find)

    @property
    def parts(self) -> tuple[Any, memoryview]:
        """(buffer, offsets) for a caller's inner loop: row i is `buffer[offsets[i] : offsets[i + 1]]`, UTF-8."""
        return self._buf, self._off

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return self.take(range(*i.indices(self.n)))
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(f"row {i} of {self.n}")
        off = self._off
        return self._buf[off[i] : off[i + 1]].decode("utf-8", "surrogatepass")

    def take(self, rows: Sequence[int]) -> list[str]:
        """The strings of `rows` (non-negative, in range), in order: a search's 3,000 hits in a millisecond or two."""
        buf, off = self._buf, self._off
        return [buf[off[r] : off[r + 1]].decode("utf-8", "surrogatepass") for r in rows]

    def __iter__(self) -> Iterator[str]:
        for lo in range(0, self.n, _CHUNK):
            yield from self.take(range(lo, min(lo + _CHUNK, self.n)))

    def find(self, s: str, _crc32: Callable[[bytes], int] = zlib.crc32) -> int | None:
        """The row holding `s` (the first, were it held twice), or None; only on a hashed column.

        Written for speed (a search maps ~3,000 hits): a few microseconds, where a dict takes a tenth of one."""
        key = s.encode("utf-8", "surrogatepass")
        b = ((_crc32(key) * MIX) & 0xFFFFFFFF) >> self._shift
        starts, off, buf = self._starts, self._off, self._buf
        j, end = starts[b], starts[b + 1]
        while j < end:
            r = self._rows[j]
            if buf[off[r] : off[r + 1]] == key:
                return r
            j += 1
        return None

    def __contains__(self, s: object) -> bool:
        if not self._hashed:
            return super().__contains__(s)
        return isinstance(s, str) and self.find(s) is not None

    def index(self, s: Any, start: int = 0, stop: int | None = None) -> int:
        r = self.find(s) if self._hashed and isinstance(s, str) and start == 0 and stop is None else None
        return r if r is not None else super().index(s, start, self.n if stop is None else stop)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StrColumn):
            if self.n != other.n:
                return False
            import numpy as np

            a0, a1, b0, b1 = self._off[0], self._off[self.n], other._off[0], other._off[other.n]
            mine = np.frombuffer(self._buf, np.uint8, a1 - a0, a0)  # numpy compares at memcmp speed
            if a1 - a0 != b1 - b0 or not np.array_equal(mine, np.frombuffer(other._buf, np.uint8, b1 - b0, b0)):
                return False
            mine, theirs = np.frombuffer(self._off, np.uint64), np.frombuffer(other._off, np.uint64)
            return bool(np.array_equal(np.diff(mine), np.diff(theirs)))
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == self.n and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<StrColumn of {self.n:,} strings>"


class KeyedColumn(Mapping[str, V]):
    """A Mapping over a hashed column: key -> `value(row)` of the row holding the key; iteration in row order."""

    def __init__(self, keys: StrColumn) -> None:
        self.keys_column = keys

    def value(self, row: int) -> V:
        raise NotImplementedError

    def get(self, key: str, default: V | None = None) -> V | None:  # type: ignore[override]
        row = self.keys_column.find(key) if isinstance(key, str) else None
        return default if row is None else self.value(row)

    def __getitem__(self, key: str) -> V:
        row = self.keys_column.find(key) if isinstance(key, str) else None
        if row is None:
            raise KeyError(key)
        return self.value(row)

    def __contains__(self, key: object) -> bool:
        return key in self.keys_column

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys_column)

    def __len__(self) -> int:
        return len(self.keys_column)


class StrTable:
    """An opened table file: `columns[name]`, the JSON `header`, and `mapped` (whether its pages are shared)."""

    def __init__(self, buf: Any, where: str) -> None:
        self.where = where
        self.mapped = isinstance(buf, mmap.mmap)
        self.buffer = buf
        if len(buf) < 16 or buf[:8] != MAGIC:
            raise ValueError(f"{where}: not a string table (no {MAGIC!r} header)")
        (size,) = struct.unpack("<Q", buf[8:16])
        if 16 + size > len(buf):
            raise ValueError(f"{where}: truncated string table (header of {size} bytes)")
        try:
            self.header: dict = json.loads(bytes(buf[16 : 16 + size]))
            if not isinstance(self.header, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            raise ValueError(f"{where}: damaged string table header ({e})") from None
        if self.header.get("version") != VERSION:
            version = self.header.get("version")
            kind = OlderTable if version in OLDER_VERSIONS else ValueError
            raise kind(f"{where}: string table version {version!r}, expected {VERSION}")
        base = _aligned(16 + size)
        self.columns: dict[str, StrColumn] = {}
        columns = self.header.get("columns")
        if not isinstance(columns, dict):
            raise ValueError(f"{where}: damaged string table header (no columns)")
        for name, spec in columns.items():
            problem = check_column(buf, spec, base)
            if problem:
                raise ValueError(f"{where}: damaged string table (column {name}: {problem})")
            self.columns[name] = StrColumn(buf, spec, base)
        problem = check_digest(buf, self.header, 16 + size)  # every byte, so no row is answered from a changed one
        if problem:
            raise ValueError(f"{where}: damaged string table ({problem})")

    @classmethod
    def open(cls, path: str | Path) -> StrTable:
        """Map a table file read-only (its pages are shared with every other process mapping it), opened below its
        directory as every index file is (safe_read: a link, a FIFO or a device is refused, never mapped)."""
        path = Path(path)
        buf = map_regular(path, below=path.parent)
        if not buf:
            raise ValueError(f"{path}: empty string table")
        return cls(buf, str(path))


def encode_table(columns: Columns, header: dict | None = None) -> list:
    """The parts (bytes and numpy arrays) of a table file, in order; `header` is recorded beside the columns."""
    import numpy as np

    specs: dict[str, dict] = {}
    sections: list[tuple[int, Any]] = []  # (position from the data start, part)
    pos = 0

    def add(part: Any, nbytes: int) -> list[int]:
        nonlocal pos
        sections.append((pos, part))
        at, pos = pos, _aligned(pos + nbytes)
        return [at, nbytes]

    offsets_of: list[tuple[np.ndarray, int]] = []
    for name, (strings, hashed) in columns.items():
        n = len(strings)
        joined = "".join(strings)
        blob = _encode(joined)
        # ASCII (bytes == characters) needs no encoding per string; otherwise one encoded string alive at a time
        sizes = map(len, strings) if len(blob) == len(joined) else (len(_encode(s)) for s in strings)
        del joined
        offsets = np.zeros(n + 1, np.uint64)
        np.cumsum(np.fromiter(sizes, np.uint64, n), out=offsets[1:])
        spec: dict[str, Any] = {"n": n, "offsets": add(offsets, offsets.nbytes)}
        spec["blob"] = add(blob, len(blob))
        offsets_of.append((offsets, spec["blob"][0]))
        if hashed:
            crcs = np.fromiter(map(zlib.crc32, map(_encode, strings)), np.uint64, n)
            bits = hash_bits(n)
            buckets = ((crcs * MIX) & 0xFFFFFFFF) >> np.uint64(32 - bits)
            rows = np.argsort(buckets, kind="stable").astype(np.uint32)
            starts = np.zeros((1 << bits) + 1, np.uint32)
            np.cumsum(np.bincount(buckets.astype(np.int64), minlength=1 << bits), out=starts[1:])
            spec["hash"] = {"bits": bits, "starts": add(starts, starts.nbytes), "rows": add(rows, rows.nbytes)}
        specs[name] = spec
    head = json.dumps(
        {"version": VERSION, "columns": specs, **(header or {}), DIGEST_KEY: BLANK_DIGEST}, sort_keys=True
    ).encode()
    base = _aligned(16 + len(head))
    for offsets, blob_at in offsets_of:
        offsets += np.uint64(base + blob_at)  # absolute file positions: a lookup slices the mapping directly
    parts: list = [MAGIC + struct.pack("<Q", len(head)) + head]
    end = 16 + len(head)
    for at, part in sections:
        parts.append(b"\0" * (base + at - end))
        parts.append(part)
        end = base + at + (part.nbytes if hasattr(part, "nbytes") else len(part))
    parts[0] = parts[0].replace(digest_field(BLANK_DIGEST), digest_field(digest_of(parts)), 1)
    return parts


def write_table(path: str | Path, columns: Columns, header: dict | None = None) -> None:
    """Write a table file, appearing at once (temporary name in the same directory, renamed into place)."""
    path = Path(path)
    write_parts_atomic(path, encode_table(columns, header))


def source_stamp(source: Path, data: bytes | None = None, fd: int | None = None) -> dict:
    """What a table records of its source: name, size, inode, mtime and ctime (ns) and, given the content, its
    sha256. The kernel sets ctime on every write, rename or utime, so equal stat fields mean the very file the table
    was derived from, untouched; anything else (a copy, a rewrite) is compared by content."""
    st = os.fstat(fd) if fd is not None else source.stat()
    stamp = {"file": source.name, "size": st.st_size, "ino": st.st_ino}
    stamp |= {"mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}
    if data is not None:
        stamp["sha256"] = hashlib.sha256(data).hexdigest()
    return stamp


def _file_sha256(path: Path) -> str:
    with open_regular(path, below=path.parent) as f:
        return _fd_sha256(f.fileno())


def _fd_sha256(fd: int) -> str:
    """sha256 of an open file, read in 4 MiB steps from its start (its position untouched): never held whole."""
    h, at = hashlib.sha256(), 0
    while chunk := os.pread(fd, 1 << 22, at):
        h.update(chunk)
        at += len(chunk)
    return h.hexdigest()


def _fresh(target: Path, source: Path, warn: bool = True) -> StrTable | None:
    """The table at `target` if it exists, is whole, and was derived from `source` as it is now; else None (with a
    warning naming a damaged one, `warn` on the first look only)."""
    try:
        table = StrTable.open(target)
    except FileNotFoundError:
        return None
    except OlderTable as e:  # written by an earlier rise_batch: derived again, nothing wrong with it
        log.info("%s; deriving it again from %s", e, source)
        return None
    except (OSError, ValueError) as e:  # damaged, truncated, not a file: never used
        if warn:
            log.warning("%s; deriving it again from %s", e, source)
        return None
    rec, now = table.header.get("source") or {}, source_stamp(source)
    if rec.get("file") != now["file"] or rec.get("size") != now["size"]:
        return None
    if all(rec.get(k) == now[k] for k in ("ino", "mtime_ns", "ctime_ns")) or rec.get("sha256") == _file_sha256(source):
        return table
    return None


def is_current(target: str | Path, source: str | Path) -> bool:
    """Whether the table `target` exists, checks out whole and matches `source` as it is now (what `derived_table`
    would open rather than derive)."""
    return _fresh(Path(target), Path(source), warn=False) is not None


def derived_table(
    target: str | Path,
    source: str | Path,
    derive: Callable[[Any], Columns],
    *,
    recorded: Recorded | None = None,
    whole: bool = True,
) -> StrTable:
    """The table `target` derived from the file `source` by `derive(source bytes)`: opened when it still matches the
    source, else derived (once per node: the first process holds a flock of the source while the others wait).

    The source must be the size `recorded` for it (an index's meta.json; with no record, at most SOURCE_MAX_BYTES),
    checked before any byte is read. `whole=False` hands `derive` the opened file instead of its bytes, for a
    format read in parts (Parquet: its footer first, so a file that is not one is refused without being read)."""
    target, source = Path(target), Path(source)
    table = _fresh(target, source)
    if table is not None:
        return table
    src = open_regular(source, below=source.parent)  # a FIFO or a link to /dev/zero: refused, never read
    fd = src.fileno()
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as e:  # e.g. NFS, where an exclusive lock wants a writable file: derive without one
            log.debug("no lock on %s (%s): deriving %s unlocked", source, e, target)
        table = _fresh(target, source, warn=False)
        if table is not None:
            return table
        check_size(source, os.fstat(fd).st_size, recorded)
        if whole:
            data = src.read()
            stamp = source_stamp(source, data, fd)
            columns = derive(data)
            del data
        else:
            columns = derive(src)
            stamp = source_stamp(source, fd=fd) | {"sha256": _fd_sha256(fd)}
        parts = encode_table(columns, {"source": stamp})
        del columns
        try:
            write_parts_atomic(target, parts)
        except OSError as e:
            log.warning(
                "cannot write %s (%s): its strings are held in this process's memory, not shared with the others "
                "of this node; make the directory writable to share them",
                target,
                e.strerror or e,
            )
            return StrTable(b"".join(p if isinstance(p, bytes) else p.tobytes() for p in parts), str(target))
        del parts
        return StrTable.open(target)
    finally:
        src.close()  # releases the flock
