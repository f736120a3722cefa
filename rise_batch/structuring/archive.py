"""Per-shard archives of a structure OUT in object storage: the shard's files, rendered once by `structure`.

In object storage a structure OUT holds no file per document (not a million small objects), so every node that
reads it needs corpus/<relpath> made locally. Rendering them there from the checkpoint and the corpus costs the
corpus's read, its checks and the render of every document on every node; unpacking the files `structure` already
rendered costs their writes only. So `finish_shard` writes OUT/archive/shard-NNNNNN.parquet (docid, relpath, text
per document, zstd) before the done marker, and records the archive's name, documents, bytes and BLAKE2b digest in
that marker (under "archive"), beside its parts'.

A node unpacks a shard's archive only once it has checked it: the object's size and digest against what the
marker records (the marker is part of the cache entry's source, compared byte for byte), and its (docid, relpath)
pairs against the shard's slice of docmap.parquet and its count against the marker's rows, all before writing
a file. A shard whose marker names no archive (an OUT written before archives) is rendered as before; one whose
archive is missing, damaged or does not match is rendered too, and the reason returned for the node to say: the
archive is never used then. A kill mid-unpack leaves the cache's staging entry without its marker, never used.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from rise_batch.io import write_bytes_atomic
from rise_batch.storage import AnyPath

ARCHIVE_DIR = "archive"


def archive_path(out: AnyPath, shard_id: int) -> AnyPath:
    return out / ARCHIVE_DIR / f"shard-{shard_id:06d}.parquet"


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def write_archive(out: AnyPath, shard_id: int, docs: Iterable[tuple[str, str, str]]) -> dict[str, Any]:
    """A shard's files, (docid, relpath, text) each (shard.py's `shard_texts`, the texts `materialize_shard` writes),
    as one Parquet object put whole in one write; returns what its done marker records of it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols: dict[str, list[str]] = {"docid": [], "relpath": [], "text": []}
    for docid, rel, text in docs:
        cols["docid"].append(docid)
        cols["relpath"].append(rel)
        cols["text"].append(text)
    buf = pa.BufferOutputStream()
    pq.write_table(pa.table(cols), buf, compression="zstd")
    data = buf.getvalue().to_pybytes()
    path = archive_path(out, shard_id)
    write_bytes_atomic(path, data)
    return {"file": path.name, "docs": len(cols["docid"]), "bytes": len(data), "blake2b": _digest(data)}


def checked_archive(
    source: AnyPath, shard_id: int, record: dict, rows: int, rel: dict[str, str]
) -> list[tuple[str, bytes]]:
    """The (relpath, UTF-8 text) pairs of a shard's archive in the OUT `source`, once it has matched its done marker's
    `record` (bytes, digest), its `rows` checkpointed documents and the shard's docmap slice `rel` (docid ->
    relpath, checked safe); raises ValueError saying what does not match, before anything is written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = archive_path(source, shard_id)
    if record.get("file") != path.name:
        raise ValueError(f"its done marker names {record.get('file')!r}, not {path.name}")
    try:
        size = path.stat().st_size  # before reading: an object of another size is never read into memory whole
        data = path.read_bytes() if size == record.get("bytes") else b""
    except FileNotFoundError:
        raise ValueError(f"{path} is missing") from None
    if len(data) != record.get("bytes") or _digest(data) != record.get("blake2b"):
        raise ValueError(f"{path} is not the {record.get('bytes')}-byte object its done marker records")
    try:
        table = pq.read_table(pa.BufferReader(data), columns=["docid", "relpath", "text"])
    except (OSError, ValueError, pa.ArrowException) as e:
        raise ValueError(f"{path} is not a readable archive ({str(e).splitlines()[0]})") from None
    docids, rels = table.column("docid").to_pylist(), table.column("relpath").to_pylist()
    if len(docids) != rows or len(set(docids)) != rows or dict(zip(docids, rels, strict=True)) != _subset(rel, docids):
        raise ValueError(f"{path} does not hold the shard's {rows} checkpointed documents at their docmap relpaths")
    texts = table.column("text").cast(pa.binary()).to_pylist()  # the file's bytes: no decode and encode again
    return list(zip(rels, texts, strict=True))


def _subset(rel: dict[str, str], docids: list[str]) -> dict[str, str] | None:
    """The docmap's relpaths of `docids`, or None when one is not in the shard's slice."""
    return {d: rel[d] for d in docids} if all(d in rel for d in docids) else None
