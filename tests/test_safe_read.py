"""rise_batch.safe_read: the one opener for every file the engine reads (index files, tables, run and job files),
on real FIFOs, devices, links and damaged arrays; and io.read_json, which every job and run file goes through."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from rise_batch.io import read_json
from rise_batch.safe_read import RefusedFile, load_npy, map_regular, read_json_file

HANG_S = 60


def _within(fn):
    """fn() in a thread; still running after HANG_S fails the test (what a FIFO did before)."""
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(v=_call(fn)), daemon=True)
    t.start()
    t.join(HANG_S)
    assert not t.is_alive(), "hung"
    return box["v"]


def _call(fn):
    try:
        return fn()
    except BaseException as e:  # noqa: BLE001 - returned to the test
        return e


@pytest.fixture
def run(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    (tmp_path / "outside.json").write_text('{"secret": 1}')
    os.mkfifo(d / "fifo.json")
    (d / "zero.json").symlink_to("/dev/zero")
    (d / "out.json").symlink_to(tmp_path / "outside.json")
    (d / "ok.json").write_text('{"a": 1}')
    (d / "bad.json").write_text("not json")
    return d


def test_read_json_refuses_a_fifo_a_device_and_a_link_in_a_run_directory(run: Path) -> None:
    """io.read_json (manifest.json, stats, trajectories, run.json, cell.json ...): before, a FIFO hung it and a
    link to /dev/zero read until MemoryError."""
    assert read_json(run / "ok.json") == {"a": 1}
    for name, why in (("fifo.json", "is a FIFO"), ("zero.json", "is a symbolic link"), ("out.json", "symbolic link")):
        err = _within(lambda n=name: read_json(run / n))
        assert isinstance(err, RefusedFile) and str(run / name) in str(err) and why in str(err), err
    with pytest.raises(ValueError, match=rf"{run / 'bad.json'} is not valid JSON"):
        read_json(run / "bad.json")


def test_json_and_maps_are_bounded(run: Path) -> None:
    (run / "big.json").write_text("[" + "1," * 100 + "1]")
    with pytest.raises(RefusedFile, match="over 64 bytes"):
        read_json_file(run / "big.json", below=run, max_bytes=64)
    with pytest.raises(RefusedFile, match="over 64 bytes"):
        map_regular(run / "big.json", below=run, max_bytes=64)
    assert map_regular(run / "ok.json", below=run)[:4] == b'{"a"'
    (run / "empty").write_bytes(b"")
    assert map_regular(run / "empty", below=run) == b""


def test_load_npy_maps_only_a_whole_array_of_the_recorded_length(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(10, dtype=np.int32))
    a = load_npy(tmp_path / "a.npy", below=tmp_path, length=10)
    assert a.tolist() == list(range(10)) and not a.flags.writeable
    np.save(tmp_path / "m.npy", np.ones((3, 4), np.float16))
    assert load_npy(tmp_path / "m.npy", below=tmp_path, ndim=2, length=3).shape == (3, 4)
    with pytest.raises(RefusedFile, match="holds 10 items where the index records 11"):
        load_npy(tmp_path / "a.npy", below=tmp_path, length=11)
    data = (tmp_path / "a.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:-4])  # the header promises 10 items, the file holds 9
    (tmp_path / "junk.npy").write_bytes(b"junk" * 10)
    (tmp_path / "obj.npy").write_bytes(b"")
    np.save(tmp_path / "pickled.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    for name, why in (
        ("cut", "not a whole 1-D array"),
        ("junk", "not a .npy array"),
        ("obj", "empty"),
        ("pickled", "not a whole 1-D array"),
        ("m", "not a whole 1-D array"),
    ):
        with pytest.raises(RefusedFile, match=why):
            load_npy(tmp_path / f"{name}.npy", below=tmp_path)
    os.mkfifo(tmp_path / "fifo.npy")
    err = _within(lambda: load_npy(tmp_path / "fifo.npy", below=tmp_path))
    assert isinstance(err, RefusedFile) and "FIFO" in str(err)


def test_parquet_files_are_read_through_the_checked_descriptor(tmp_path: Path) -> None:
    """docmap.parquet (load_docmap: a run's gold check, export) and checkpoint parts: a FIFO or a link to /dev/zero
    in their place is refused at once, naming it (before: a hang, or a read of /dev/zero)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rise_batch.safe_read import read_parquet
    from rise_batch.space.docstore import load_docmap

    docs = tmp_path / "docs"
    docs.mkdir()
    pq.write_table(pa.table({"docid": ["a"], "relpath": ["x.txt"]}), docs / "docmap.parquet")
    assert load_docmap(docs) == {"a": "x.txt"}
    assert read_parquet(docs / "docmap.parquet", columns=["docid"]).to_pydict() == {"docid": ["a"]}
    (docs / "docmap.parquet").unlink()
    (docs / "docmap.parquet").symlink_to("/dev/zero")
    err = _within(lambda: load_docmap(docs))
    assert isinstance(err, RefusedFile) and "docmap.parquet is a symbolic link" in str(err), err
    (docs / "docmap.parquet").unlink()
    os.mkfifo(docs / "docmap.parquet")
    err = _within(lambda: load_docmap(docs))
    assert isinstance(err, RefusedFile) and "is a FIFO" in str(err), err
