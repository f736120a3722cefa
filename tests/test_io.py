"""rise_batch.io: the bytes each writer produces (they are part of the outputs' contract), no partial file when a
write fails, and superseding an old run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rise_batch.io import (
    dump_json,
    read_json,
    supersede,
    write_bytes_atomic,
    write_json_atomic,
    write_parquet_atomic,
    write_text_atomic,
)

OBJ = {"b": 1, "a": ["é", 2.5], "p": Path("x")}


def test_json_formats_match_the_historical_writers(tmp_path: Path) -> None:
    dump_json(OBJ, tmp_path / "job.json")  # manifest/stats/batches.json: corpus/scan.py's dump_json
    assert (tmp_path / "job.json").read_bytes() == json.dumps(OBJ, indent=2, sort_keys=True, default=str).encode()
    run = {"b": 1, "a": ["é", 2.5]}
    write_json_atomic(tmp_path / "sub" / "run.json", run)  # run directories: eval/rundir.py's writer
    assert (tmp_path / "sub" / "run.json").read_bytes() == json.dumps(run, ensure_ascii=False, indent=1).encode()
    write_json_atomic(tmp_path / "done.json", run, indent=None, sort_keys=True, ensure_ascii=True)  # done markers
    assert (tmp_path / "done.json").read_text() == '{"a": ["\\u00e9", 2.5], "b": 1}'
    assert read_json(tmp_path / "sub" / "run.json") == run


def test_text_is_written_byte_for_byte(tmp_path: Path) -> None:
    write_text_atomic(tmp_path / "d.txt", "a\r\nb\rc\u2028é")
    assert (tmp_path / "d.txt").read_bytes() == "a\r\nb\rc\u2028é".encode()
    write_bytes_atomic(tmp_path / "d.txt", b"\x00new")
    assert (tmp_path / "d.txt").read_bytes() == b"\x00new"
    assert [p.name for p in tmp_path.iterdir()] == ["d.txt"]


class Boom(Exception):
    pass


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    write_json_atomic(path, {"v": 1})

    def explode(_obj: object) -> object:
        raise Boom

    with pytest.raises(Boom):
        write_json_atomic(path, {"v": object()}, default=explode)  # fails while serializing: nothing written
    with pytest.raises(TypeError):
        write_json_atomic(tmp_path / "new.json", {"v": object()})
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(path, "lone \ud800 surrogate")  # fails while encoding
    assert read_json(path) == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_a_writer_raising_midway_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    def half_then_fail(table: object, where: Path) -> None:
        Path(where).write_bytes(b"PAR1 half a file")
        raise Boom

    monkeypatch.setattr(pq, "write_table", half_then_fail)
    with pytest.raises(Boom):
        write_parquet_atomic(tmp_path / "docmap.parquet", pa.table({"x": [1]}))
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    write_parquet_atomic(tmp_path / "docmap.parquet", pa.table({"x": [1]}))
    assert pq.read_table(tmp_path / "docmap.parquet").to_pylist() == [{"x": 1}]
    assert [p.name for p in tmp_path.iterdir()] == ["docmap.parquet"]


def test_supersede_moves_only_the_named_outputs_present(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text("{}")
    (tmp_path / "trajectories").mkdir()
    (tmp_path / "trajectories" / "q.json").write_text("{}")
    (tmp_path / "keep.txt").write_text("not an output")
    dest = supersede(tmp_path, ("run.json", "trajectories", "judgments"))
    assert dest.parent == tmp_path and dest.name.startswith("superseded-")
    assert sorted(p.name for p in dest.iterdir()) == ["run.json", "trajectories"]
    assert (dest / "trajectories" / "q.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt", dest.name]
