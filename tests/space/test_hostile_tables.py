"""String tables with crafted internals, their source stamp still matching: `rise-batch workspace search` gives the
same answer as over the clean tables (each altered table derived again, one warning line naming it), never an
IndexError traceback, hits shown as "file missing" or "0 matched".

Before the fix: a row count too large, hash rows out of range and hash bits of 40 ended in tracebacks; zeroed hash
starts made every vocabulary lookup miss ("0 matched") and every docmap lookup miss (every hit "file missing").
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rise_batch.strtable import StrTable
from tests.conftest import REPO, sample_rows, write_jsonl
from tests.space.conftest import make_docs

TABLES = ("index/docids.strtab", "index/vocab.strtab", "docs/docmap.strtab")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """A docs dir and its index, with every string table derived (one search made them)."""
    from rise_batch.index import build_index

    root = tmp_path_factory.mktemp("tables")
    _, relpaths = make_docs(root / "docs")
    write_jsonl(root / "corpus.jsonl", sample_rows(len(relpaths)))
    build_index(root / "corpus.jsonl", root / "index", workers=1)
    assert _search(root, root / "ws0").returncode == 0
    assert all((root / t).exists() for t in TABLES)
    return root


def _search(root: Path, ws: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rise_batch.cli", "workspace", "search", "--index", str(root / "index")]
    cmd += ["--docs", str(root / "docs"), "--workspace", str(ws), "-k", "5", "autism", "language"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)


def _layout(data: bytes) -> tuple[dict, int, int]:
    (size,) = struct.unpack("<Q", data[8:16])
    return json.loads(data[16 : 16 + size]), size, -(-(16 + size) // 64) * 64


def _with_header(data: bytes, change: Callable[[dict], None]) -> bytes:
    """The table with its JSON header changed in place (compact JSON, padded to the old length)."""
    head, size, _ = _layout(data)
    change(head)
    new = json.dumps(head, separators=(",", ":")).encode()
    assert len(new) <= size
    return data[:16] + new.ljust(size) + data[16 + size :]


def _poke(data: bytes, section: Callable[[dict], list[int]], dtype, values: Callable[[np.ndarray], None]) -> bytes:
    """The table with the array of one section (of its first column) changed."""
    head, _, base = _layout(data)
    at, nbytes = section(next(iter(head["columns"].values())))
    out = bytearray(data)
    values(np.frombuffer(out, dtype, nbytes // np.dtype(dtype).itemsize, base + at))
    return bytes(out)


def _set(a: np.ndarray, **at: int) -> None:
    for i, v in at.items():
        a[int(i.lstrip("_"))] = v


def _count_too_large(data: bytes) -> bytes:
    return _with_header(data, lambda h: [c.__setitem__("n", c["n"] + 1000) for c in h["columns"].values()])


def _hash_bits_40(data: bytes) -> bytes:
    if "hash" not in next(iter(_layout(data)[0]["columns"].values())):
        return _offsets_into_the_header(data)
    return _with_header(
        data, lambda h: [c["hash"].__setitem__("bits", 40) for c in h["columns"].values() if "hash" in c]
    )


def _offsets_into_the_header(data: bytes) -> bytes:
    return _poke(data, lambda c: c["offsets"], np.uint64, lambda a: _set(a, _1=8, _2=16))


def _hash_rows_out_of_range(data: bytes) -> bytes:
    if "hash" not in next(iter(_layout(data)[0]["columns"].values())):
        return _offsets_into_the_header(data)  # the docid column has no hash: damage what it has
    return _poke(data, lambda c: c["hash"]["rows"], np.uint32, lambda a: a.__setitem__(slice(None), 0xFFFFFFF0))


def _zeroed_hash_starts(data: bytes) -> bytes:
    if "hash" not in next(iter(_layout(data)[0]["columns"].values())):
        return _count_too_large(data)
    return _poke(data, lambda c: c["hash"]["starts"], np.uint32, lambda a: a.__setitem__(slice(0, len(a) - 1), 0))


def _two_rows_swapped(data: bytes) -> bytes:
    """The first two rows of equal length (and different bytes) of the first column swapped in the blob: every
    offset, count and hash section stays as it was."""
    head, _, base = _layout(data)
    spec = next(iter(head["columns"].values()))
    at, nbytes = spec["offsets"]
    off = np.frombuffer(data, np.uint64, nbytes // 8, base + at).astype(np.int64)
    rows = [data[off[i] : off[i + 1]] for i in range(len(off) - 1)]
    i, j = next(
        (i, j) for i in range(len(rows)) for j in range(i) if len(rows[i]) == len(rows[j]) != rows[i] != rows[j]
    )
    out = bytearray(data)
    out[off[i] : off[i + 1]], out[off[j] : off[j + 1]] = rows[j], rows[i]
    return bytes(out)


@pytest.mark.parametrize(
    "craft",
    [
        _count_too_large,
        _hash_rows_out_of_range,
        _offsets_into_the_header,
        _zeroed_hash_starts,
        _hash_bits_40,
        _two_rows_swapped,
    ],
    ids=lambda f: f.__name__.strip("_"),
)
def test_a_crafted_string_table_is_derived_again_and_the_answer_is_the_same(world, tmp_path, craft):
    clean = _search(world, tmp_path / "ws-clean")
    root = tmp_path / "w"
    shutil.copytree(world / "docs", root / "docs")
    shutil.copytree(world / "index", root / "index")
    for t in TABLES:  # the copies keep their tables' bytes; a table records its source's content too
        (root / t).write_bytes(craft((world / t).read_bytes()))
    res = _search(root, tmp_path / "ws")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert res.stdout.replace(str(tmp_path / "ws"), "WS") == clean.stdout.replace(str(tmp_path / "ws-clean"), "WS")
    assert "0 matched" not in res.stdout and "file missing" not in res.stdout
    for t in TABLES:
        warned = [line for line in res.stderr.splitlines() if f"{root / t}: damaged string table" in line]
        assert len(warned) == 1, res.stderr
        StrTable.open(root / t)  # derived again, whole


def test_a_table_that_does_not_check_out_is_refused_in_one_line(world):
    data = _zeroed_hash_starts((world / "docs/docmap.strtab").read_bytes())
    with pytest.raises(ValueError, match=r"^x: damaged string table \(column docid: row \d+ is not in the hash"):
        StrTable(data, "x")


def test_two_docids_of_equal_length_swapped_in_the_index_table_never_answer(world, tmp_path):
    """docids.strtab with the rows of enwiki-12 (Anarchism) and enwiki-25 (Autism) swapped, docids.json unchanged:
    the table's digest no longer matches, so it is derived again from docids.json and the search for "anarchism"
    links Anarchism.txt, recorded in the workspace manifest under its own docid.

    Before the fix: every check passed (the docid column has no hash to sample), Autism.txt came first and the
    manifest recorded enwiki-25 for the anarchism hit."""
    root = tmp_path / "w"
    shutil.copytree(world / "docs", root / "docs")
    shutil.copytree(world / "index", root / "index")
    table = root / "index" / "docids.strtab"
    data = table.read_bytes()
    a, b = data.index(b"enwiki-12"), data.index(b"enwiki-25")
    swapped = bytearray(data)
    swapped[a : a + 9], swapped[b : b + 9] = b"enwiki-25", b"enwiki-12"
    table.write_bytes(bytes(swapped))
    cmd = [sys.executable, "-m", "rise_batch.cli", "workspace", "search", "--index", str(root / "index")]
    cmd += ["--docs", str(root / "docs"), "--workspace", str(tmp_path / "ws"), "-k", "3", "anarchism"]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stderr
    hits = [line.split("] ", 1)[1] for line in res.stdout.splitlines() if line.strip().startswith("1. [")]
    assert hits == ["en.wikipedia.org/Anarchism.txt"], res.stdout
    first = json.loads((tmp_path / "ws" / "manifest.jsonl").read_text().splitlines()[0])
    assert (first["docid"], first["relpath"]) == ("enwiki-12", "en.wikipedia.org/Anarchism.txt")
    assert f"{table}: damaged string table (its content does not match its digest)" in res.stderr
    assert list(StrTable.open(table).columns["docid"]) == json.loads((root / "index" / "docids.json").read_text())
