"""`rise-batch sweep`: the command a user runs (in process here, on the fake server, `workers: 0`): --dry-run,
--only, --plan resumed past by the sweep, --max-cost against what OUT records, and a sweep whose OUT, docs, index
and queries are all in object storage (it used to exit 0 having written a local directory named `s3:`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rise_batch.cli import main
from rise_batch.eval.rundir import load_run
from rise_batch.eval.sweep import JudgeSpec, judge_llm_config
from rise_batch.eval.sweep_plan import judge_costs
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.storage import location
from tests.agent.conftest import agent_world  # noqa: F401 - the shared docs + index world
from tests.agent.helpers import N_DOCS, run_dir, title_query, write_queries
from tests.conftest import SAMPLE


def sweep_config(path: Path, out: str, queries: str, docs: str, index: str, base_url: str, **extra: Any) -> Path:
    sweep = {
        "name": "cmd",
        "out": out,
        "queries": queries,
        "systems": ["rise", "rise-bm25"],
        "models": ["gpt-5.4-mini"],
        "k": [5],
        "corpora": [{"name": "sample", "docs": docs, "index": index}],
        "run": {
            "workers": 0,
            "concurrency": 4,
            "max_calls": 8,
            "index_backend": "numpy",
            "progress": False,
            "llm": {"base_url": base_url, "rpm": 600000},
        },  # fmt: skip
        "judge": {"model": "gpt-5.4-mini", "base_url": base_url, "concurrency": 4},
        **extra,
    }
    path.write_text(yaml.safe_dump({"sweep": sweep}))
    return path


def queries_of(world: Any, path: Path, n: int) -> Path:
    return write_queries(path, [title_query(d, t) for d, t in list(world.titles.items())[:n]])


def test_dry_run_lists_cells_and_only_refuses_an_unknown_cell(agent_world, capsys) -> None:  # noqa: F811
    d = run_dir("sweep-cmd-dry")
    q = queries_of(agent_world, d / "q.jsonl", 2)
    cfg = sweep_config(d / "s.yaml", str(d / "out"), str(q), str(agent_world.docs), str(agent_world.index),
                       "http://127.0.0.1:9")  # fmt: skip
    assert main(["sweep", str(cfg), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [x.split("\t")[0] for x in lines] == [
        "rise__gpt-5.4-mini__k5__sample",
        "rise-bm25__gpt-5.4-mini__k5__sample",
    ]
    assert all("done=0" in x for x in lines) and not (d / "out" / "cells").exists()
    assert main(["sweep", str(cfg), "--only", "nope"]) == 2
    err = capsys.readouterr().err
    assert "--only: unknown cell(s) ['nope']" in err and "Traceback" not in err


def test_plan_runs_pilots_then_the_sweep_resumes_past_them_under_a_cap(agent_world, capsys) -> None:  # noqa: F811
    d = run_dir("sweep-cmd-plan")
    q = queries_of(agent_world, d / "q.jsonl", 7)
    with FakeLLMServer() as server:
        cfg = sweep_config(d / "s.yaml", str(d / "out"), str(q), str(agent_world.docs), str(agent_world.index),
                           server.base_url, pilot=5)  # fmt: skip
        assert main(["sweep", str(cfg), "--plan", "--json"]) == 0
        plan = json.loads(capsys.readouterr().out)
        assert [(c["pilot_queries"], c["remaining_queries"]) for c in plan["cells"]] == [(5, 2), (5, 2)]
        for c in plan["cells"]:
            u = c["cost_usd"]
            assert 0 < u["low"] < u["estimate"] < u["high"]
            assert 0 <= c["hours"]["low"] <= c["hours"]["estimate"] <= c["hours"]["high"]
        assert plan["total"]["cost_usd"]["estimate"] == pytest.approx(  # each figure rounded to 6 decimals
            sum(c["cost_usd"]["estimate"] for c in plan["cells"]), abs=1e-6 * len(plan["cells"])
        )
        figures = {"estimate", "low", "high"}
        for c in plan["cells"]:  # the agent's and the judge's cost per cell, the judge's measured by the pilot
            assert {"cell", "cost_usd", "hours"} <= set(c) and set(c["cost_usd"]) == figures <= set(c["hours"])
            assert c["judge_basis"] == "pilot judgments" and c["judge_cost_usd"]["estimate"] > 0
            assert c["cost_usd"]["estimate"] == pytest.approx(
                c["agent_cost_usd"]["estimate"] + c["judge_cost_usd"]["estimate"], abs=1e-4
            )
        for key in ("cost_usd", "hours"):
            tot = plan["total"][key]
            assert set(tot) == figures and tot["low"] <= sum(c[key]["estimate"] for c in plan["cells"]) <= tot["high"]
        cell = d / "out" / "cells" / plan["cells"][0]["cell"]
        run = load_run(cell)  # without judgments the grader's cost is counted from its prompt and the final texts
        stems = sorted(run.trajectories)
        counted, basis = judge_costs(run._replace(judgments={}), stems, judge_llm_config(JudgeSpec()), None)
        assert basis.startswith("prompt + final text") and len(counted) == 5 and all(x > 0 for x in counted)
        assert main(["sweep", str(cfg), "--plan"]) == 0  # the pilots are done: nothing runs, the table again
        table = capsys.readouterr().out
        assert table.splitlines()[3].startswith("total") and "judge cost per trajectory from: pilot judgments" in table
        piloted = {p: p.read_text() for p in (d / "out" / "cells").rglob("trajectories/*.json")}
        assert len(piloted) == 10
        assert not (d / "out" / "report").exists()  # a plan runs nothing else

        assert main(["sweep", str(cfg), "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert (result["ran"], result["incomplete"]) == (2, [])
        assert all(p.read_text() == text for p, text in piloted.items())  # the pilots are not run again
        assert len(list((d / "out" / "cells").rglob("trajectories/*.json"))) == 14
        assert (d / "out" / "report" / "report.md").is_file()
        # the plan kept in OUT beside what the 4 queries after the pilots then cost, agents and judge
        planned = result["planned"]
        assert planned["planned_usd"] == plan["total"]["cost_usd"] and planned["spent_usd"] > 0
        assert planned["spent_usd_in_all"] == pytest.approx(result["cost_usd"], abs=1e-5)

        # the records already reach the cap: nothing starts, exit 3 with one line
        assert main(["sweep", str(cfg), "--max-cost", str(result["cost_usd"] / 2), "--force-judge"]) == 3
        err = capsys.readouterr().err
        assert "at or over --max-cost" in err and "Traceback" not in err


def test_a_sweep_in_object_storage_writes_the_bucket_not_a_local_dir(
    agent_world,  # noqa: F811
    s3,
    tmp_path,
    monkeypatch,
    capsys,  # noqa: F811
) -> None:
    monkeypatch.chdir(tmp_path)  # where the old code made ./s3:/...
    monkeypatch.setenv("RISE_BATCH_CACHE", str(run_dir("sweep-cmd-cache")))  # world-traversable: the sandbox reads it
    root = location(s3.uri())
    (root / "corpus.jsonl.gz").write_bytes(SAMPLE.read_bytes())
    docs = root / "docs"
    assert main(["structure", "--corpus", str(root / "corpus.jsonl.gz"), "--out", str(docs), "--limit",
                 str(N_DOCS), "--index", "--no-progress"]) == 0  # fmt: skip
    local_q = queries_of(agent_world, tmp_path / "q.jsonl", 3)
    (root / "q.jsonl").write_bytes(local_q.read_bytes())
    with FakeLLMServer() as server:
        cfg = sweep_config(tmp_path / "s.yaml", str(root / "sw"), str(root / "q.jsonl"), str(docs),
                           str(docs / "index"), server.base_url)  # fmt: skip
        assert main(["sweep", str(cfg)]) == 0
        line = capsys.readouterr().out
        assert f"out={root}/sw" in line and "incomplete=0" in line
        assert not any(p.name.startswith("s3") for p in tmp_path.iterdir())
        state = json.loads((root / "sw" / "sweep.json").read_text())
        assert {e["status"] for e in state["cells"].values()} == {"done"} and len(state["cells"]) == 2
        for cell in state["cells"]:
            where = root / "sw" / "cells" / cell
            assert len((where / "trajectories").glob("*.json")) == 3 and len((where / "judgments").glob("*.json")) == 3
        assert (root / "sw" / "report" / "report.md").is_file()
        assert (root / "sw" / "report" / "accuracy_vs_cost.png").is_file()
        sent = len(server.log())
        # resumed from the bucket: every cell skipped, nothing sent
        assert main(["sweep", str(cfg), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["skipped"] == 2 and len(server.log()) == sent


def test_cells_that_would_share_a_directory_are_refused_and_a_long_name_is_shortened(agent_world, capsys) -> None:  # noqa: F811
    """`a/b` and `a_b` (and `A_B`: one directory on a case-insensitive file system) make the same directory name:
    refused at validation naming both; a 5,000-character corpus name is shortened with a digest, never an OSError."""
    d = run_dir("sweep-cmd-ids")
    q = queries_of(agent_world, d / "q.jsonl", 2)
    docs, index = str(agent_world.docs), str(agent_world.index)
    for other in ("a_b", "A_B"):
        corpora = [{"name": "a/b", "docs": docs, "index": index}, {"name": other, "docs": docs, "index": index}]
        cfg = sweep_config(d / "s.yaml", str(d / "out"), str(q), docs, index, "http://127.0.0.1:9", corpora=corpora)
        for more in (["--dry-run"], []):
            assert main(["sweep", str(cfg), *more]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "would share one run directory" in err[0], err
            assert "corpus 'a/b'" in err[0] and f"corpus '{other}'" in err[0]
    assert not (d / "out").exists()

    name = "c" * 5000
    corpora = [{"name": name, "docs": docs, "index": index}, {"name": name[:-1] + "d", "docs": docs, "index": index}]
    cfg = sweep_config(d / "s.yaml", str(d / "out"), str(q), docs, index, "http://127.0.0.1:9", corpora=corpora)
    assert main(["sweep", str(cfg), "--dry-run", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    ids = [r["cell"] for r in rows]
    assert len(rows) == 4 and len(set(ids)) == 4 and all(len(i.encode()) <= 200 for i in ids)
    assert all(i.startswith("rise") and "__ccc" in i for i in ids)


def test_json_is_printed_when_cells_are_left_incomplete(agent_world, capsys) -> None:  # noqa: F811
    """Exit 75 (a server that refuses connections: every trajectory is left for the resume) prints the summary with
    `--json` as a finished sweep does, plus the exit code and the line on stderr."""
    d = run_dir("sweep-cmd-75")
    q = queries_of(agent_world, d / "q.jsonl", 2)
    cfg = sweep_config(d / "s.yaml", str(d / "out"), str(q), str(agent_world.docs), str(agent_world.index),
                       "http://127.0.0.1:9", systems=["rise"])  # fmt: skip
    data = yaml.safe_load(cfg.read_text())
    data["sweep"]["run"]["llm"]["max_attempts"] = 1  # refused at once, not after every retry's backoff
    cfg.write_text(yaml.safe_dump(data))
    assert main(["sweep", str(cfg), "--json"]) == 75
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["exit_code"] == 75 and result["incomplete"] == ["rise__gpt-5.4-mini__k5__sample"]
    assert result["message"] in captured.err and "re-run the same command" in result["message"]
