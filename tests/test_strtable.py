"""Memory-mapped string tables: exact round trips, lookups by value, and derived tables that are never stale."""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rise_batch.strtable import StrTable, derived_table, write_table
from tests.conftest import REPO

ODD = ["", "a", "naïve", "東京都", "x\x00y", "\udcff lone surrogate", "Ωmega ﬁnance", "line\nbreak", "a" * 5000]


def strings(n: int = 20_000) -> list[str]:
    return [f"doc-{i:07d}" for i in range(n)] + ODD + [f"<urn:uuid:{i:08x}-0000>" for i in range(n)]


def test_a_table_round_trips_every_string_and_finds_each_by_value(tmp_path):
    values = strings()
    write_table(tmp_path / "t.strtab", {"k": (values, True), "r": (values[::-1], False), "e": ([], True)})
    t = StrTable.open(tmp_path / "t.strtab")
    k, r, e = t.columns["k"], t.columns["r"], t.columns["e"]
    assert t.mapped and isinstance(t.buffer, mmap.mmap)  # the pages are the file's, shared through the page cache
    assert list(k) == values and list(r) == values[::-1] and list(e) == [] and len(k) == len(values)
    assert [k.find(s) for s in values] == list(range(len(values)))
    assert k[-1] == values[-1] and k[3:7] == values[3:7] and k.take([5, 0, 5]) == [values[5], values[0], values[5]]
    assert k.find("doc-9999999") is None and "naïve" in k and "nope" not in k and 7 not in k and e.find("") is None
    assert k == values and k != r and r == values[::-1] and k.index("東京都") == values.index("東京都")
    with pytest.raises(IndexError):
        k[len(values)]


def _docids_source(d: Path, docids: list[str]) -> Path:
    src = d / "docids.json"
    src.write_text(json.dumps(docids))
    return src


def _derive(data: bytes) -> dict:
    return {"docid": (json.loads(data), True)}


def test_a_derived_table_is_written_once_and_reused_while_its_source_is_unchanged(tmp_path):
    src = _docids_source(tmp_path, ["a", "b", "c"])
    t = derived_table(tmp_path / "d.strtab", src, _derive)
    assert list(t.columns["docid"]) == ["a", "b", "c"] and t.mapped
    inode = (tmp_path / "d.strtab").stat().st_ino
    calls = []
    again = derived_table(tmp_path / "d.strtab", src, lambda data: calls.append(1) or _derive(data))
    assert (
        calls == [] and (tmp_path / "d.strtab").stat().st_ino == inode and list(again.columns["docid"]) == list("abc")
    )
    os.utime(src, ns=(1, 1))  # a copy with another mtime, same bytes: the recorded sha256 says it is the same
    assert derived_table(tmp_path / "d.strtab", src, lambda data: calls.append(1) or _derive(data)) and calls == []
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_stale_or_damaged_table_is_derived_again_never_used(tmp_path):
    src = _docids_source(tmp_path, ["a", "b", "c"])
    derived_table(tmp_path / "d.strtab", src, _derive)
    st = src.stat()
    src.write_text(json.dumps(["x", "y", "z"]))  # same size; and even the same mtime
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert list(derived_table(tmp_path / "d.strtab", src, _derive).columns["docid"]) == ["x", "y", "z"]
    src.write_text(json.dumps(["p", "q"]))
    assert list(derived_table(tmp_path / "d.strtab", src, _derive).columns["docid"]) == ["p", "q"]
    whole = (tmp_path / "d.strtab").read_bytes()
    (tmp_path / "d.strtab").write_bytes(whole[: len(whole) // 2])  # a truncated copy
    assert list(derived_table(tmp_path / "d.strtab", src, _derive).columns["docid"]) == ["p", "q"]
    (tmp_path / "d.strtab").write_bytes(b"garbage")
    assert list(derived_table(tmp_path / "d.strtab", src, _derive).columns["docid"]) == ["p", "q"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_a_directory_that_cannot_take_the_table_gets_one_in_memory_with_a_warning(tmp_path, caplog):
    src = _docids_source(tmp_path, ["a", "b"])
    os.chmod(tmp_path, 0o555)
    try:
        t = derived_table(tmp_path / "d.strtab", src, _derive)
    finally:
        os.chmod(tmp_path, 0o755)
    assert list(t.columns["docid"]) == ["a", "b"] and not t.mapped and not (tmp_path / "d.strtab").exists()
    assert "not shared" in caplog.text


def test_a_table_that_cannot_be_written_is_built_in_memory_with_a_warning(tmp_path, caplog):
    src = _docids_source(tmp_path, ["a", "b"])
    (tmp_path / "d.strtab").mkdir()  # the name is taken by a directory: the rename fails, for root too
    t = derived_table(tmp_path / "d.strtab", src, _derive)
    assert list(t.columns["docid"]) == ["a", "b"] and t.columns["docid"].find("b") == 1 and not t.mapped
    assert "not shared with the others" in caplog.text and not list(tmp_path.glob(".*.tmp"))


def test_processes_opening_a_missing_table_at_once_derive_it_once(tmp_path):
    """The actors of a node start together: the first derives under a lock of the source, the others wait and map
    the same file (so its pages are shared, not one copy per deriving process)."""
    _docids_source(tmp_path, [f"d{i}" for i in range(200_000)])
    script = textwrap.dedent(
        f"""
        import json, os, sys, time
        from pathlib import Path
        from rise_batch.strtable import derived_table
        d = Path({str(tmp_path)!r})
        while not (d / "go").exists():
            time.sleep(0.001)
        def derive(data):
            with open(d / "derivations", "a") as f:
                f.write("x")
            time.sleep(0.5)
            return {{"docid": (json.loads(data), True)}}
        t = derived_table(d / "d.strtab", d / "docids.json", derive)
        inodes = {{line.split()[4] for line in open("/proc/self/maps") if line.rstrip().endswith("/d.strtab")}}
        print(",".join(sorted(inodes)), t.columns["docid"][199_999])
        """
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [
        subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True) for _ in range(3)
    ]
    (tmp_path / "go").touch()
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert (tmp_path / "derivations").read_text() == "x"
    assert {o[1] for o in outs} == {"d199999"}
    assert {o[0] for o in outs} == {str((tmp_path / "d.strtab").stat().st_ino)}  # one file, mapped by all three


def test_batch_lookups_give_the_answers_of_the_one_by_one_calls(tmp_path):
    """`find_many` and `take_many` (numpy, a search's union at once) answer exactly as `find` and `take` do: odd
    strings (NUL, non-ASCII, lone surrogates, empty), keys held twice in a query, keys not held, no keys."""
    import random

    values = strings(3000)
    write_table(tmp_path / "t.strtab", {"k": (values, True)})
    k = StrTable.open(tmp_path / "t.strtab").columns["k"]
    rng = random.Random(7)
    keys = values + ["nope", "", "doc-9999999", "\udcff"] + rng.choices(values, k=2000)
    assert k.find_many(keys).tolist() == [-1 if k.find(s) is None else k.find(s) for s in keys]
    assert k.find_many([]).tolist() == []
    for rows in ([], [len(values) - 1], rng.choices(range(len(values)), k=3000)):
        assert k.take_many(rows) == k.take(rows)
    plain = [r for r, s in enumerate(values) if "\x00" not in s]
    assert k.take_many(plain) == k.take(plain)


def test_a_table_of_an_older_format_is_derived_again_without_a_warning(tmp_path, caplog):
    """A table written before tables recorded their digest (format version 1) is derived again, quietly: nothing is
    wrong with it, it only cannot be checked whole."""
    src = _docids_source(tmp_path, ["a", "b", "c"])
    derived_table(tmp_path / "d.strtab", src, _derive)
    data = (tmp_path / "d.strtab").read_bytes()
    (tmp_path / "d.strtab").write_bytes(data.replace(b'"version": 2', b'"version": 1', 1))
    caplog.set_level("INFO")
    t = derived_table(tmp_path / "d.strtab", src, _derive)
    assert list(t.columns["docid"]) == ["a", "b", "c"] and t.header["version"] == 2
    assert "version 1, expected 2" in caplog.text and not [r for r in caplog.records if r.levelname == "WARNING"]


def test_a_row_changed_in_place_is_caught_by_the_digest(tmp_path, caplog):
    """Two rows of equal length swapped in a column without a hash: every offset and count still checks out, the
    digest does not, so the table is derived again from its source."""
    src = _docids_source(tmp_path, ["doc-1", "doc-2", "doc-3"])
    write_table(tmp_path / "d.strtab", {"docid": (["doc-1", "doc-2", "doc-3"], False)})
    data = (tmp_path / "d.strtab").read_bytes()
    (tmp_path / "d.strtab").write_bytes(data.replace(b"doc-1doc-2", b"doc-2doc-1", 1))
    with pytest.raises(ValueError, match=r"d.strtab: damaged string table \(its content does not match its digest\)"):
        StrTable.open(tmp_path / "d.strtab")
    derived = derived_table(tmp_path / "d.strtab", src, lambda data: {"docid": (json.loads(data), False)})
    assert list(derived.columns["docid"]) == ["doc-1", "doc-2", "doc-3"]
