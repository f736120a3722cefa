"""The stats.json (and `run --json`) of a few fixed runs, normalised: what the stats parity test compares with the
golden files under tests/golden/stats/, which were made by this script from the code before stats were typed.

Imports nothing but rise_batch, so it runs against any checkout of the package: to remake the golden files from a
given version, put that checkout first on PYTHONPATH and run `python tests/stats_scenarios.py tests/golden/stats`.
Times (which vary from run to run) are replaced by a placeholder; everything else is compared as written.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rise_batch
from rise_batch.agent.job import run_trajectories
from rise_batch.agent.run_config import load_run_config
from rise_batch.config import load_structure_config
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.fake_llm.agent import AgentResponder
from rise_batch.fake_llm.chat import FallbackResponder
from rise_batch.structuring.job import run_structure

SAMPLE = Path(rise_batch.__file__).parent / "data" / "enwiki_sample.jsonl.gz"
TIMES = ("wall_seconds", "docs_per_second", "shard_seconds")  # vary from run to run
FAST = {"llm_rpm": 100_000, "llm_tpm": 100_000_000, "batch_poll_s": 0.01}  # the client's own limiter never waits


def normalised(stats: dict[str, Any]) -> str:
    """The stats indented, in their own key order (stats.json's is sorted; a run's is the order a sweep's state
    file keeps), times replaced by a placeholder."""
    return json.dumps({k: "<time>" if k in TIMES else v for k, v in stats.items()}, indent=2)


def structure(out: Path, **kw: Any) -> dict[str, Any]:
    """One structure run in process; stats.json as written, even when the run ends incomplete."""
    cfg = load_structure_config(None, corpus=str(SAMPLE), out=str(out), workers=0, progress=False, **kw)
    try:
        run_structure(cfg)
    except Exception as e:  # noqa: BLE001 - RunIncomplete: stats.json is written before it is raised
        if type(e).__name__ != "RunIncomplete":
            raise
    return json.loads((out / "stats.json").read_text())


def heuristic(tmp: Path) -> dict[str, dict[str, Any]]:
    kw = {"backend": "heuristic", "limit": 40, "shard_docs": 15}
    return {"heuristic": structure(tmp / "out", **kw), "heuristic_resumed": structure(tmp / "out", **kw)}


def llm(tmp: Path) -> dict[str, dict[str, Any]]:
    kw = {"backend": "llm", "limit": 12, "shard_docs": 6} | FAST
    with FakeLLMServer() as server:
        online = structure(tmp / "online", llm_base_url=server.base_url, **kw)
        resumed = structure(tmp / "online", llm_base_url=server.base_url, **kw)
    with FakeLLMServer() as server:
        batch = structure(tmp / "batch", llm_base_url=server.base_url, mode="batch", **kw)
    return {"llm_online": online, "llm_online_resumed": resumed, "llm_batch": batch}


def llm_left(tmp: Path) -> dict[str, dict[str, Any]]:
    """Every document's first request fails with a 5xx and one attempt is allowed: the first run leaves them all
    (docs_left), the second does them."""
    kw = {"backend": "llm", "limit": 12, "shard_docs": 6, "llm_max_attempts": 1} | FAST
    with FakeLLMServer(p500=1.0, max_faults_per_key=1) as server:
        first = structure(tmp / "out", llm_base_url=server.base_url, **kw)
        second = structure(tmp / "out", llm_base_url=server.base_url, **kw)
    return {"llm_left": first, "llm_left_resumed": second}


def trajectories(tmp: Path) -> dict[str, dict[str, Any]]:
    """A RISE run of 3 queries over a heuristic structure of 30 documents (with its index), then its resume."""
    os.chmod(tmp, 0o755)  # the sandbox runs agent commands as an unprivileged uid
    docs = tmp / "docs"
    structure(docs, backend="heuristic", limit=30, index=True)
    queries = tmp / "q.jsonl"
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as fh:
        texts = [json.loads(next(fh))["text"] for _ in range(3)]
    titles = [t.split("title: ", 1)[1].split("\n", 1)[0].strip('"') for t in texts]
    lines = [
        {"query_id": f"q{i}", "query": f"What does the article on '{t}' say about it?", "answer": t}
        for i, t in enumerate(titles)
    ]
    queries.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    release = threading.Event()
    server = FakeLLMServer(responders=[AgentResponder(stop=release), FallbackResponder()])
    opts: dict[str, Any] = dict(
        queries=str(queries), system="rise", out=str(tmp / "run"), docs=str(docs), index=str(docs / "index"),
        workers=0, concurrency=1, index_backend="numpy", progress=False, llm_model="gpt-5.4-mini",
        llm_rpm=1_000_000, llm_tpm=10**10, llm_max_attempts=2,
    )  # fmt: skip
    with server:
        opts["llm_base_url"] = server.base_url
        first = run_trajectories(load_run_config(None, **opts))
        again = run_trajectories(load_run_config(None, **opts))
        release.set()
    return {"run": first, "run_resumed": again}


SCENARIOS: dict[str, Callable[[Path], dict[str, dict[str, Any]]]] = {
    "heuristic": heuristic,
    "llm": llm,
    "llm_left": llm_left,
    "trajectories": trajectories,
}


def run_scenario(name: str) -> dict[str, str]:
    """Each stats file of one scenario, normalised, by its golden file's stem."""
    old = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = ""  # the fake server takes any key; a real one must not leak to it
    tmp = Path(tempfile.mkdtemp(prefix="rise-stats-"))
    try:
        return {stem: normalised(stats) for stem, stats in SCENARIOS[name](tmp).items()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is None:
            os.environ.pop("OPENAI_API_KEY", None)
        else:
            os.environ["OPENAI_API_KEY"] = old


def main(dest: str) -> None:
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    for name in SCENARIOS:
        for stem, text in run_scenario(name).items():
            (out / f"{stem}.json").write_text(text + "\n", encoding="utf-8")
            print(f"{out / stem}.json")


if __name__ == "__main__":
    main(sys.argv[1])
