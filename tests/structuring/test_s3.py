"""`structure` with its corpus and its OUT in object storage (a real S3 server, SeaweedFS): the same rows as a POSIX
run, no file per document in the bucket, a tree built where it is used (`materialize --dest`), and a SIGKILL of the
CLI mid-run resumed to the uninterrupted run's outputs without paying twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from functools import partial

import pyarrow.parquet as pq

from rise_batch.cli import main
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.storage import arrow_source, location
from rise_batch.structuring.checkpoint import CheckpointStore
from tests.cli import cli as shared_cli
from tests.conftest import sample_rows
from tests.structuring.test_kill_resume import OUTPUT_FIELDS, doc_key, write_config

N_DOCS = 60


def rows_of(out) -> list[tuple]:
    """Checkpoint rows without timings, in docid order."""
    return sorted(tuple(getattr(r, f) for f in OUTPUT_FIELDS) for r in CheckpointStore(out).read_rows())


def table(path) -> list[dict]:
    where, fs = arrow_source(path)
    return pq.read_table(where, filesystem=fs).to_pylist()


def upload_corpus(s3, tmp_path):
    data = "".join(json.dumps(r) + "\n" for r in sample_rows(N_DOCS)).encode()
    (tmp_path / "c.jsonl").write_bytes(data)
    root = location(s3.uri())
    (root / "c.jsonl").write_bytes(data)
    return root


cli = partial(shared_cli, env={"OPENAI_API_KEY": ""})


def test_structure_on_s3_equals_posix_and_materializes_where_used(tmp_path, s3, capsys):
    root = upload_corpus(s3, tmp_path)
    flags = ["--shard-docs", "20", "--index", "--no-progress"]
    assert main(["structure", "--corpus", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "ref"), *flags]) == 0
    assert main(["structure", "--corpus", f"{root}/c.jsonl", "--out", f"{root}/out", *flags]) == 0
    line = capsys.readouterr().out
    assert f"out={root}/out" in line and f"index={root}/out/index" in line
    out = root / "out"
    assert rows_of(out) == rows_of(tmp_path / "ref") and len(rows_of(out)) == N_DOCS
    for name in ("docmap.parquet", "bad_rows.parquet"):
        assert table(out / name) == table(tmp_path / "ref" / name)
    names = {str(p.relative_to(out)) for p, _ in out.list(recursive=True)}
    assert not any(n.startswith("corpus/") for n in names)  # no object per document
    assert {"manifest.json", "stats.json", "stats/shard-000002.json", "index/meta.json"} <= names
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["corpus"] == f"{root}/c.jsonl" and manifest["shards"][0]["source"] == f"{root}/c.jsonl"
    ref_ids = json.loads((tmp_path / "ref" / "index" / "docids.json").read_text())
    assert json.loads((out / "index" / "docids.json").read_text()) == ref_ids
    # a re-run resumes (nothing redone) and --verify checks every part's digest on the bucket
    assert main(["structure", "--corpus", f"{root}/c.jsonl", "--out", f"{root}/out", *flags, "--verify"]) == 0
    assert "docs_per_second=0.0" in capsys.readouterr().out
    # the tree, built where it is used, is the POSIX run's OUT/corpus/ byte for byte
    assert main(["materialize", str(out), "--dest", str(tmp_path / "tree")]) == 0
    ref = {str(p.relative_to(tmp_path / "ref" / "corpus")): p.read_bytes()
           for p in (tmp_path / "ref" / "corpus").rglob("*.txt")}  # fmt: skip
    got = {str(p.relative_to(tmp_path / "tree")): p.read_bytes() for p in (tmp_path / "tree").rglob("*.txt")}
    assert got == ref and len(got) == N_DOCS
    assert main(["materialize", str(out)]) == 2  # object storage: the tree needs a local --dest
    assert "--dest" in capsys.readouterr().err


def test_structure_on_s3_with_two_ray_workers(tmp_path, s3):
    root = upload_corpus(s3, tmp_path)
    r = cli("structure", "--corpus", f"{root}/c.jsonl", "--out", f"{root}/out", "--shard-docs", "20",
            "--workers", "2", "--index", "--no-progress")  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert main(["structure", "--corpus", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "ref"),
                 "--shard-docs", "20", "--no-progress"]) == 0  # fmt: skip
    assert rows_of(root / "out") == rows_of(tmp_path / "ref")
    assert json.loads((root / "out" / "index" / "meta.json").read_text())["counts"]["n_docs"] == N_DOCS


def test_sigkill_mid_structure_on_s3_then_resume_equals_uninterrupted(tmp_path, s3):
    root = upload_corpus(s3, tmp_path)
    keys = {r["docid"]: doc_key(r["text"]) for r in sample_rows(N_DOCS)}
    with FakeLLMServer(latency_ms=15) as server:
        ref = cli("structure", "--config", str(write_config(tmp_path / "ref.yaml", tmp_path / "c.jsonl",
                                                             tmp_path / "ref", server.base_url)))  # fmt: skip
        assert ref.returncode == 0, ref.stderr[-3000:]
        out = root / "out"
        config = write_config(tmp_path / "k.yaml", f"{root}/c.jsonl", f"{root}/out", server.base_url)
        mark = len(server.log())
        cmd = [sys.executable, "-m", "rise_batch.cli", "structure", "--config", str(config)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=os.environ | {"OPENAI_API_KEY": ""})  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and len(server.log()) - mark < 30:
            time.sleep(0.005)
        assert proc.poll() is None, "the job finished before the kill point"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        done = {r.docid for r in CheckpointStore(out).read_rows()}
        assert 0 < len(done) < N_DOCS
        after_kill = len(server.log())
        resumed = cli("structure", "--config", str(config))
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        resent = [e for e in server.log(after_kill) if e.get("key") in {keys[d] for d in done}]
        assert resent == []  # nothing checkpointed in the bucket was paid for again
    assert rows_of(out) == rows_of(tmp_path / "ref")
    stats = json.loads((out / "stats.json").read_text())
    assert stats["docs_total"] == N_DOCS


def test_credentials_in_the_uri_reach_no_output_log_or_message(tmp_path, s3):
    """Keys given in the URI (pyarrow's s3://KEY:SECRET@bucket/…?endpoint_override=…), none in the environment:
    the job runs, and the secret is in no line it prints, no object it writes, no message of a failure."""
    root = upload_corpus(s3, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | {"OPENAI_API_KEY": ""}
    secret = s3.env["AWS_SECRET_ACCESS_KEY"]
    auth = f"{s3.env['AWS_ACCESS_KEY_ID']}:{secret}"
    opts = f"?endpoint_override={s3.endpoint.removeprefix('http://')}&scheme=http"
    base = str(root).replace("s3://", f"s3://{auth}@")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rise_batch.cli", *args], capture_output=True, text=True,
                              timeout=600, env=env)  # fmt: skip

    ok = run("structure", "--corpus", f"{base}/c.jsonl{opts}", "--out", f"{base}/out{opts}", "--shard-docs", "20",
             "--index", "--workers", "2", "--no-progress")  # fmt: skip
    assert ok.returncode == 0, ok.stderr[-3000:].replace(secret, "<SECRET>")
    assert f"out={root}/out" in ok.stdout
    bad = run("structure", "--corpus", f"{base}/nope.jsonl{opts}", "--out", f"{base}/out2{opts}")
    assert bad.returncode == 2 and f"{root}/nope.jsonl: corpus path does not exist" in bad.stderr
    for text in (ok.stdout, ok.stderr, bad.stdout, bad.stderr):
        assert secret not in text
    objects = (root / "out").list(recursive=True)
    assert len(objects) > 10 and not [p for p, _ in objects if secret.encode() in p.read_bytes()]
