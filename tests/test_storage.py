"""storage.py: one path-like type over POSIX and object storage, against a real S3 server (SeaweedFS)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from rise_batch.io import dump_json, read_json, write_parquet_atomic, write_text_atomic
from rise_batch.storage import ObjectPath, arrow_source, is_local_path, location, open_binary, redact


def test_paths_stay_paths_and_uris_are_redacted_where_recorded():
    assert location("runs/out") == Path("runs/out")
    assert location("file:///tmp/x") == Path("/tmp/x")
    assert is_local_path("runs/out") and is_local_path("file:///tmp/x") and is_local_path(Path("s3:/x"))
    assert not is_local_path("s3://b/p") and not is_local_path("gs://b/p")
    uri = "s3://bkt/run?access_key=AK&secret_key=SECRET&endpoint_override=h:1"
    assert redact(uri) == "s3://bkt/run"
    assert redact("s3://user:pw@bkt/run") == "s3://bkt/run"
    assert redact("runs/a?b") == "runs/a?b"


def test_object_path_round_trip_on_s3(s3):
    root = location(s3.uri())
    assert isinstance(root, ObjectPath) and not root.exists()
    write_text_atomic(root / "a" / "x.txt", "héllo\r\n")
    dump_json({"k": 1}, root / "m.json")
    write_parquet_atomic(root / "a" / "t.parquet", pa.table({"x": [1, 2]}))
    assert (root / "a" / "x.txt").read_bytes() == "héllo\r\n".encode()
    assert read_json(root / "m.json") == {"k": 1}
    assert root.exists() and root.is_dir() and (root / "m.json").is_file()
    assert [(str(p.relative_to(root)), n) for p, n in root.list(recursive=True)] == [
        ("a/t.parquet", (root / "a" / "t.parquet").stat().st_size), ("a/x.txt", 8), ("m.json", 12)
    ]  # fmt: skip
    assert [p.name for p in (root / "a").glob("*.txt")] == ["x.txt"]
    path, fs = arrow_source(root / "a" / "t.parquet")
    assert pq.read_table(path, filesystem=fs).column("x").to_pylist() == [1, 2]
    with open_binary(root / "a" / "x.txt") as fh:
        assert list(fh) == ["héllo\r\n".encode()]
    back = pickle.loads(pickle.dumps(root / "m.json"))  # a worker rebuilds it from the URI
    assert back == root / "m.json" and read_json(back) == {"k": 1}
    (root / "m.json").unlink()
    assert not (root / "m.json").exists()


def test_uri_options_are_used_but_never_shown(s3, monkeypatch):
    env = s3.env
    for k in env:  # only the URI says where and who
        monkeypatch.delenv(k)
    user = f"{env['AWS_ACCESS_KEY_ID']}:{env['AWS_SECRET_ACCESS_KEY']}"
    opts = f"endpoint_override={env['AWS_ENDPOINT_URL'].removeprefix('http://')}&scheme=http"
    loc = location(f"s3://{user}@{s3.bucket}/opt/f.txt?{opts}")
    loc.write_text("x")
    assert str(loc) == f"s3://{s3.bucket}/opt/f.txt" and env["AWS_SECRET_ACCESS_KEY"] not in repr(loc)
    again = location(f"s3://{s3.bucket}/opt/f.txt")  # as a manifest records it: the bucket's options are remembered
    assert again.read_text() == "x" and pickle.loads(pickle.dumps(again)).read_text() == "x"
    assert env["AWS_SECRET_ACCESS_KEY"] not in str(again)


def test_fsspec_filesystem_for_schemes_pyarrow_lacks():
    root = location("memory://rise-storage-test/d")
    write_text_atomic(root / "f.txt", "abc")
    assert (root / "f.txt").read_text() == "abc" and [p.name for p in root.glob("*")] == ["f.txt"]


def test_messages_are_redacted():
    from rise_batch.storage import redact_text

    msg = "s3://AK:SECRET@bkt/run?endpoint_override=h:1&scheme=http: corpus path does not exist; see 'gs://a:b@x/y'."
    assert redact_text(msg) == "s3://bkt/run: corpus path does not exist; see 'gs://x/y'."
    assert redact_text("http://127.0.0.1:8000/v1 and runs/out") == "http://127.0.0.1:8000/v1 and runs/out"
