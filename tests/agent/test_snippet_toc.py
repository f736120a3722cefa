"""`--system snippet-toc` end to end: `rise-batch run` in a real subprocess, the project's fake server over HTTP.

It needs no shell, so a machine without bubblewrap runs it (where `rise` is refused), and its trajectory is the
one the tools promise: a search listing sections, a read of a listed range that starts at the section heading.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.agent.helpers import read_trajectories, run_dir, title_query, write_queries
from tests.commands.test_demo import path_without

LISTED = re.compile(r"^\[\d+\] (\S.*?\.txt)  L(\d+)\u2013(\d+)  ", re.MULTILINE)


def run_cli(out: Path, agent_world, base_url: str, system: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    items = [(d, t) for d, t in agent_world.titles.items() if len(t) > 3][:3]
    queries = write_queries(out / "q.jsonl", [title_query(d, t) for d, t in items])
    argv = ["run", "--queries", str(queries), "--system", system, "--index", str(agent_world.index)]
    argv += ["--docs", str(agent_world.docs), "--out", str(out / "run"), "--base-url", base_url, "--workers", "0"]
    argv += ["--index-backend", "numpy", "--tpm", "100000000", "--rpm", "1000000", "--no-progress"]
    cmd = [sys.executable, "-m", "rise_batch.cli", *argv]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def test_snippet_toc_runs_without_bubblewrap(agent_world, fake_server, tmp_path):
    env = {**os.environ, "PATH": path_without(tmp_path, "bwrap")}
    refused = run_cli(run_dir("snippet-nobwrap-rise"), agent_world, fake_server.base_url, "rise", env)
    assert refused.returncode == 2 and "bubblewrap" in refused.stderr, refused.stderr  # the PATH really lacks it
    out = run_dir("snippet-nobwrap")
    res = run_cli(out, agent_world, fake_server.base_url, "snippet-toc", env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "run system=snippet-toc" in res.stdout and "answered:3" in res.stdout, res.stdout
    trajectories = read_trajectories(out / "run")
    assert len(trajectories) == 3
    for qid, t in trajectories.items():
        tools = [s["tool"] for s in t["steps"]]
        assert tools == ["search", "read"], tools
        search, read = t["steps"]
        listed = {(m.group(1), int(m.group(2)), int(m.group(3))) for m in LISTED.finditer(search["output"])}
        args = read["arguments"]
        assert (args["path"], args["start"], args["end"]) in listed  # it read a range the search listed
        first = read["output"].split("\n", 1)[0]
        assert re.match(rf"^\s*{args['start']}\t## \S", first), first  # ... which starts at its section heading
        assert qid in t["surfaced_docids"] and qid in t["retrieved_docids"]
        assert t["exact_answer"] not in ("", "unknown") and t["workspace_docs"] == len(t["retrieved_docids"])
    meta = json.loads((out / "run" / "run.json").read_text())
    assert meta["system"] == "snippet-toc" and meta["config"]["allow_unsandboxed"] is False
