"""rise_batch.io: the bytes each writer produces (they are part of the outputs' contract), no partial file when a
write fails, and superseding an old run."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from rise_batch.io import (
    RefusedFile,
    dump_json,
    read_json,
    read_regular_file,
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

    def half_then_fail(table: object, where: Any) -> None:
        where.write(b"PAR1 half a file")
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


def test_a_symlink_planted_at_a_temporary_name_never_redirects_a_write(tmp_path: Path) -> None:
    """Links at every name the writer used to pick (`.<name>.<pid>.tmp` for this process and the next PIDs) aimed at
    a file outside the output directory: the write lands in place and the outside file keeps its bytes."""
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    pid = os.getpid()
    for p in range(max(pid - 50, 1), pid + 500):
        for name in ("q1.json", "docmap.parquet"):
            (out / f".{name}.{p}.tmp").symlink_to(outside)
    write_json_atomic(out / "q1.json", {"v": 1})
    write_text_atomic(out / "q1.json", '{"v": 2}')
    pa = pytest.importorskip("pyarrow")
    write_parquet_atomic(out / "docmap.parquet", pa.table({"x": [1]}))
    assert outside.read_text() == "precious"
    assert read_json(out / "q1.json") == {"v": 2} and stat.S_ISREG(os.lstat(out / "q1.json").st_mode)
    assert stat.S_ISREG(os.lstat(out / "docmap.parquet").st_mode)
    left = [p for p in out.iterdir() if not p.is_symlink()]
    assert sorted(p.name for p in left) == ["docmap.parquet", "q1.json"]  # no temporary left behind


def test_a_leftover_temporary_is_named_as_clean_temporaries_finds_it(tmp_path: Path) -> None:
    """A write killed between write and rename leaves `.<name>.<pid>.<random>.tmp`: hidden and ending in `.tmp`."""
    from rise_batch.io import _create_temporary

    fd, tmp = _create_temporary(tmp_path / "a.txt")
    os.close(fd)
    assert tmp.parent == tmp_path and tmp.name.startswith(f".a.txt.{os.getpid()}.") and tmp.name.endswith(".tmp")
    assert stat.S_IMODE(tmp.stat().st_mode) == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_read_regular_file_refuses_what_is_not_a_regular_file_below(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "sub").mkdir(parents=True)
    (run / "sub" / "ok.json").write_text("{}")
    (tmp_path / "outside.json").write_text("secret")
    os.mkfifo(run / "fifo.json")
    (run / "zero.json").symlink_to("/dev/zero")
    (run / "out.json").symlink_to(tmp_path / "outside.json")
    (run / "link").symlink_to(tmp_path)
    assert read_regular_file(run / "sub" / "ok.json", below=run, max_bytes=10) == b"{}"
    refused = {
        "fifo.json": "is a FIFO",
        "zero.json": "is a symbolic link",
        "out.json": "is a symbolic link",
        "link/outside.json": "is a symbolic link",
        "sub": "is a directory",
        "../outside.json": "not a file below",
    }
    for rel, why in refused.items():
        with pytest.raises(RefusedFile, match=why):
            read_regular_file(run / rel, below=run, max_bytes=10)
    with pytest.raises(RefusedFile, match="is a character device"):
        read_regular_file(run / "zero.json", max_bytes=10)  # without `below`, links are followed: type still checked
    with pytest.raises(RefusedFile, match="over 1 bytes"):
        read_regular_file(run / "sub" / "ok.json", below=run, max_bytes=1)
    with pytest.raises(FileNotFoundError, match="missing.json"):
        read_regular_file(run / "sub" / "missing.json", below=run, max_bytes=10)
