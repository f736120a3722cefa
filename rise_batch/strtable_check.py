"""A string table's column checked against its file before any lookup trusts it (rise_batch/strtable.py).

A table is derived from its source and records the source's stamp, but the table file itself can be altered while
that stamp still matches (a damaged copy, or a crafted one in a shared index directory). Trusted blindly, a row
count larger than its offsets, an offset into the header, a hash row out of range or a hash of 40 bits end in an
`IndexError` at the first lookup, or worse, in wrong answers: hash starts zeroed make every lookup miss (every hit
"file missing", every query "0 matched"). So every number a lookup reads is checked once, when the table is opened,
with numpy over the mapping (a few milliseconds at a million rows, and no private copy kept): the sections lie
within the file and after the header, have exactly the sizes the counts give, the offsets rise from the blob's
start to its end, the hash's starts rise from 0 to the row count, its rows are a permutation of the rows, and a
sample of rows (spread over the whole column) sits in the bucket its hash names. A table that fails is rebuilt from
its source or refused (the caller's choice), never used.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from typing import Any

MIX = 0x9E3779B1  # Fibonacci hashing: spreads CRC-32's linear structure over the bucket bits
_CHUNK = 1 << 20  # elements per numpy step: bounded temporaries whatever the table's size
_SAMPLE = 512  # rows whose bucket is recomputed on open
DIGEST_KEY = "digest"  # the header's key for the sha256 of the file (with its own hex digits zeroed)
BLANK_DIGEST = "0" * 64
_HEX = re.compile(r"[0-9a-f]{64}")


def digest_field(hexdigest: str) -> bytes:
    """The header's bytes for the digest (json.dumps's spelling of the key and its value)."""
    return f'"{DIGEST_KEY}": "{hexdigest}"'.encode()


def digest_of(parts: Any) -> str:
    """sha256 of a table's parts in order (bytes or C-contiguous numpy arrays), its header holding BLANK_DIGEST."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.hexdigest()


def check_digest(buf: Any, header: dict, head_end: int) -> str | None:
    """What is wrong with the table in `buf` as a whole (its header of `head_end` bytes from the start included), or
    None when its sha256, its own digits zeroed, is the one its header records."""
    recorded = header.get(DIGEST_KEY)
    if not isinstance(recorded, str) or not _HEX.fullmatch(recorded):
        return "no digest of its content"
    head = bytes(buf[:head_end])
    if head.count(digest_field(recorded)) != 1:
        return "its header was rewritten"
    with memoryview(buf) as view:
        got = digest_of((head.replace(digest_field(recorded), digest_field(BLANK_DIGEST)), view[head_end:]))
    return None if got == recorded else "its content does not match its digest"


def hash_bits(n: int) -> int:
    """The bucket bits of a hashed column of n rows (as many buckets as rows, rounded up to a power of two)."""
    return max(0, (n - 1).bit_length())


def bucket(key: bytes, shift: int) -> int:
    """The bucket of a key's UTF-8 bytes: what the writer sorted rows by and what a lookup reads."""
    return ((zlib.crc32(key) * MIX) & 0xFFFFFFFF) >> shift


def _section(spec: Any, base: int, size: int, itemsize: int) -> tuple[int, int] | str:
    """(file position, bytes) of a section as the header gives it, or what is wrong with it."""
    if not (isinstance(spec, list) and len(spec) == 2 and all(type(x) is int and x >= 0 for x in spec)):
        return f"section {spec!r} is not [position, size]"
    at, nbytes = base + spec[0], spec[1]
    if at + nbytes > size:
        return f"section at {at} of {nbytes} bytes ends past the file's {size} bytes"
    if at % itemsize or nbytes % itemsize:
        return f"section at {at} of {nbytes} bytes is not aligned to {itemsize}"
    return at, nbytes


def _rising(np: Any, a: Any) -> bool:
    """Is the array non-decreasing? In chunks overlapping by one element, so no temporary is the array's size."""
    for lo in range(0, max(len(a) - 1, 0), _CHUNK):
        part = a[lo : lo + _CHUNK + 1]
        if bool((part[1:] < part[:-1]).any()):
            return False
    return True


def check_column(buf: Any, spec: Any, base: int) -> str | None:
    """What is wrong with a column of the table in `buf` whose data starts at `base`, or None when every number a
    lookup reads checks out."""
    import numpy as np

    if not isinstance(spec, dict) or type(spec.get("n")) is not int or spec["n"] < 0:
        return "no row count"
    n, size = spec["n"], len(buf)
    off = _section(spec.get("offsets"), base, size, 8)
    blob = _section(spec.get("blob"), base, size, 1)
    if isinstance(off, str) or isinstance(blob, str):
        return off if isinstance(off, str) else blob  # type: ignore[return-value]
    if off[1] != 8 * (n + 1):
        return f"{n} rows but {off[1] // 8} offsets"
    offsets = np.frombuffer(buf, np.uint64, n + 1, off[0])
    if int(offsets[0]) != blob[0] or int(offsets[n]) != blob[0] + blob[1] or not _rising(np, offsets):
        return "offsets do not rise from the blob's start to its end"
    if "hash" not in spec:
        return None
    h = spec["hash"]
    if not isinstance(h, dict) or type(h.get("bits")) is not int or h["bits"] != hash_bits(n):
        return f"hash bits {h.get('bits') if isinstance(h, dict) else h!r} for {n} rows (expected {hash_bits(n)})"
    starts = _section(h.get("starts"), base, size, 4)
    rows = _section(h.get("rows"), base, size, 4)
    if isinstance(starts, str) or isinstance(rows, str):
        return starts if isinstance(starts, str) else rows  # type: ignore[return-value]
    if starts[1] != 4 * ((1 << h["bits"]) + 1) or rows[1] != 4 * n:
        return "hash sections do not match the row count"
    s = np.frombuffer(buf, np.uint32, starts[1] // 4, starts[0])
    if int(s[0]) != 0 or int(s[-1]) != n or not _rising(np, s):
        return "hash starts do not rise from 0 to the row count"
    r = np.frombuffer(buf, np.uint32, n, rows[0])
    seen = np.zeros(n, np.bool_)
    for lo in range(0, n, _CHUNK):
        part = r[lo : lo + _CHUNK]
        if n and int(part.max()) >= n:
            return "hash rows out of range"
        seen[part] = True
    if not seen.all():
        return "hash rows are not each row once"
    shift = 32 - h["bits"]
    for j in np.linspace(0, n - 1, min(n, _SAMPLE), dtype=np.int64).tolist():
        row = int(r[j])
        b = bucket(bytes(buf[int(offsets[row]) : int(offsets[row + 1])]), shift)
        if not int(s[b]) <= j < int(s[b + 1]):
            return f"row {row} is not in the hash bucket of its string"
    return None
