"""The whole pipeline with the corpus and every output in object storage (a real S3 server, SeaweedFS): structure
with --index, run (in process and on 2 local Ray workers), judge, report, export; its trajectories, judgments and
run files equal a POSIX run's, timings aside."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from rise_batch.cli import main
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.storage import location
from tests.agent.conftest import agent_world, fake_server  # noqa: F401  (fixtures)
from tests.agent.helpers import N_DOCS, run_dir, title_query, write_queries
from tests.conftest import SAMPLE

TIMINGS = {"elapsed", "elapsed_s", "seconds", "wall_seconds", "created", "started", "finished", "t", "timing"}
# the fake server simulates prompt caching across all requests it serves, so the same run made second is served
# more from its cache: cached tokens, and the dollars they change, depend on the order of runs, not on storage


def cache_dependent(key: str) -> bool:
    return key in ("cached_input_tokens", "input_tokens_cached") or "usd" in key


def strip(obj: Any) -> Any:
    """A record without its timings and what the fake server's cache decides."""
    if isinstance(obj, dict):
        return {k: strip(v) for k, v in obj.items() if k not in TIMINGS and not cache_dependent(k)}
    if isinstance(obj, list):
        return [strip(v) for v in obj]
    return obj


def jsons(root) -> dict[str, Any]:
    return {p.name: strip(json.loads(p.read_text())) for p in root.glob("*.json")}


def run_args(queries, docs, index, out, base_url, *extra) -> list[str]:
    return [
        "run", "--queries", str(queries), "--system", "rise", "--docs", str(docs), "--index", str(index),
        "--out", str(out), "--index-backend", "numpy", "--no-progress", "--base-url", base_url,
        "--model", "gpt-5.4-mini", "--rpm", "1000000", "--tpm", "10000000000", *extra,
    ]  # fmt: skip


@pytest.fixture
def cache(monkeypatch):
    """Local copies of the bucket's docs and index in a world-traversable directory (the sandbox's uid reads them)."""
    d = run_dir("cache")
    monkeypatch.setenv("RISE_BATCH_CACHE", str(d))
    return d


def test_pipeline_on_s3_equals_posix(agent_world, fake_server, s3, cache, tmp_path, capsys):  # noqa: F811
    w = agent_world
    root = location(s3.uri())
    (root / "corpus.jsonl.gz").write_bytes(SAMPLE.read_bytes())
    out = root / "docs"
    assert main(["structure", "--corpus", str(root / "corpus.jsonl.gz"), "--out", str(out), "--limit",
                 str(N_DOCS), "--index", "--no-progress"]) == 0  # fmt: skip
    rows = [title_query(d, t) for d, t in list(w.titles.items())[:3]]
    queries = write_queries(tmp_path / "q.jsonl", rows)
    url = fake_server.base_url
    ref = run_dir("ref-run")
    assert main(run_args(queries, w.docs, w.index, ref, url, "--workers", "0")) == 0
    remote = root / "run"
    assert main(run_args(queries, out, out / "index", remote, url, "--workers", "0")) == 0
    assert f"out={remote}" in capsys.readouterr().out
    assert jsons(remote / "trajectories") == jsons(ref / "trajectories") and len(jsons(ref / "trajectories")) == 3
    assert sum(p.read_bytes().count(b"\n") for p in (remote / "events").glob("*.jsonl")) >= 3
    run_json = json.loads((remote / "run.json").read_text())
    assert run_json["config"]["docs"] == str(out) and run_json["config"]["index"] == str(out / "index")
    # a re-run resumes from the bucket: nothing runs again
    assert main(run_args(queries, out, out / "index", remote, url, "--workers", "0", "--json")) == 0
    assert json.loads(capsys.readouterr().out)["ran"] == 0

    with FakeLLMServer() as grader:  # the default responders grade
        for run in (ref, remote):
            assert main(["judge", str(run), "--base-url", grader.base_url, "--model", "gpt-5.4-mini"]) == 0
    assert jsons(remote / "judgments") == jsons(ref / "judgments") and len(jsons(ref / "judgments")) == 3
    assert main(["report", str(ref), "--out", str(tmp_path / "report")]) == 0
    assert main(["report", str(remote), "--out", str(root / "report")]) == 0
    a = json.loads((root / "report" / "report.json").read_text())["runs"][0]
    b = json.loads((tmp_path / "report" / "report.json").read_text())["runs"][0]
    assert not a["unreadable_files"] and not b["unreadable_files"]  # a real run's own files all read
    assert strip({**a, "run_dir": ""}) == strip({**b, "run_dir": ""})
    assert (root / "report" / "report.md").is_file()
    assert main(["export", "bcp", str(ref), "--out", str(tmp_path / "bcp")]) == 0
    assert main(["export", "bcp", str(remote), "--out", str(root / "bcp")]) == 0
    assert jsons(root / "bcp") == jsons(tmp_path / "bcp") and len(jsons(root / "bcp")) == 3

    # the same run on 2 Ray workers (a local Ray of the CLI process), into another prefix of the bucket
    ray_run = root / "ray-run"
    cmd = [
        sys.executable,
        "-m",
        "rise_batch.cli",
        *run_args(queries, out, out / "index", ray_run, url, "--workers", "2"),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=os.environ)
    assert r.returncode == 0, r.stderr[-3000:]
    assert jsons(ray_run / "trajectories") == jsons(ref / "trajectories")
