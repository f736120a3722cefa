"""Many lookups in a string table at once, in numpy: a search's ~2,000 hits mapped in one pass, not one by one.

One lookup from Python (rise_batch/strtable.py: `find`, `col[i]`) costs a hash, a few reads of the mapping through
memoryview indexing and a decode: 3-10 µs on a loaded machine, ×2,000 hits ×2 (the index's row -> docid, the
docmap's docid -> relpath) was the +6 ms a search call paid for the string tables. Here the keys are hashed with
`map(zlib.crc32, ...)` (C), the buckets, candidate rows and byte comparisons are numpy gathers over the mapping,
and the strings handed out are cut from one decoded text. The answers are those of the one-by-one calls: the first
row holding a key in bucket order (= row order), -1 where none does.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from rise_batch.strtable_check import MIX

_SCALAR_TAIL = 64  # keys left to one-by-one lookups


class Arrays(NamedTuple):
    """numpy views of one column over its table's buffer (no copy): what a batch lookup reads."""

    data: Any  # uint8, the whole buffer (offsets are absolute positions in it)
    off: Any  # uint64 [n + 1]
    starts: Any  # uint32 [2**bits + 1], or None for a column without a hash
    rows: Any  # uint32 [n], or None
    shift: int


def _ragged(np: Any, begin: Any, lengths: Any) -> Any:
    """Positions begin[i] + 0..lengths[i]-1 for every i, concatenated: one cumsum of steps (1 inside a string, the
    jump to the next string's start at its first byte)."""
    total = int(lengths.sum())
    if not total:
        return np.zeros(0, np.int64)
    some = lengths > 0
    b, n = begin[some], lengths[some]
    steps = np.ones(total, np.int64)
    steps[0] = b[0]
    steps[np.cumsum(n[:-1])] = b[1:] - (b[:-1] + n[:-1]) + 1
    return np.cumsum(steps, out=steps)


def take_many(a: Arrays, rows: Any) -> list[str]:
    """The strings of `rows` (in range), in order: gathered with a NUL after each, decoded once and split (a string
    holding a NUL itself is decoded alone instead)."""
    import numpy as np

    rows = np.asarray(rows, np.int64)
    if not rows.size:
        return []
    begin = a.off[rows].astype(np.int64)
    lengths = a.off[rows + 1].astype(np.int64) - begin
    raw = a.data[_ragged(np, begin, lengths)]
    if not raw.all():  # a NUL inside a string: cut by offsets
        blob, ends = raw.tobytes(), np.cumsum(lengths).tolist()
        return [blob[i:j].decode("utf-8", "surrogatepass") for i, j in zip([0, *ends[:-1]], ends, strict=True)]
    joined = np.insert(raw, np.cumsum(lengths[:-1]), 0)
    return joined.tobytes().decode("utf-8", "surrogatepass").split("\0")


def find_many(a: Arrays, keys: Sequence[str], find: Callable[[str], int | None]) -> Any:
    """int64 rows of `keys` in a hashed column, -1 where a key is not held; the few keys of crowded buckets left
    after the first rows of each are looked up by `find`, one by one (cheaper than more numpy passes)."""
    import numpy as np

    n = len(keys)
    out = np.full(n, -1, np.int64)
    if not n or len(a.rows) == 0:
        return out
    enc = [k.encode("utf-8", "surrogatepass") for k in keys]
    crc = np.fromiter(map(zlib.crc32, enc), np.uint64, n)
    bucket = (((crc * np.uint64(MIX)) & np.uint64(0xFFFFFFFF)) >> np.uint64(a.shift)).astype(np.int64)
    lo, hi = a.starts[bucket].astype(np.int64), a.starts[bucket + 1].astype(np.int64)
    key_len = np.fromiter(map(len, enc), np.int64, n)
    key_data = np.frombuffer(b"".join(enc), np.uint8)
    key_at = np.cumsum(key_len) - key_len
    todo, step = np.flatnonzero(lo < hi), 0
    while todo.size > _SCALAR_TAIL or (todo.size and step < 2):  # the step-th row of each key's bucket
        pos = lo[todo] + step
        live = pos < hi[todo]
        todo, pos = todo[live], pos[live]
        rows = a.rows[pos].astype(np.int64)
        begin = a.off[rows].astype(np.int64)
        same = (a.off[rows + 1].astype(np.int64) - begin) == key_len[todo]
        cand, lengths = np.flatnonzero(same), key_len[todo[same]]
        eq = a.data[_ragged(np, begin[cand], lengths)] == key_data[_ragged(np, key_at[todo[cand]], lengths)]
        owner = np.repeat(np.arange(cand.size), lengths)
        hit = np.zeros(todo.size, np.bool_)
        hit[cand[np.bincount(owner[~eq], minlength=cand.size) == 0]] = True
        out[todo[hit]] = rows[hit]
        todo, step = todo[~hit], step + 1
    for i in todo.tolist():
        row = find(keys[i])
        out[i] = -1 if row is None else row
    return out
