"""A whole sweep on Ray against the fake server (its scripted agent and grader): 2 systems x 2 K x 4 queries,
judged and reported, then resumed (nothing is sent again), then one damaged cell resumed alone."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rise_batch.fake_llm import FakeLLMServer
from tests.agent.conftest import agent_world  # noqa: F401 - the shared docs + index world
from tests.agent.helpers import run_dir, title_query, write_queries
from tests.eval.test_report import assert_png

ROOT = Path(__file__).resolve().parents[2]


def eval_sweep_main(argv: list[str]) -> int:
    spec = importlib.util.spec_from_file_location("eval_sweep_job", ROOT / "jobs" / "eval_sweep.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv)


def agent_requests(server: FakeLLMServer) -> list[dict[str, Any]]:
    return [e for e in server.log() if e.get("responder") == "agent"]


def judge_requests(server: FakeLLMServer) -> list[dict[str, Any]]:
    return [e for e in server.log() if e.get("responder") == "judge"]


@pytest.mark.slow
def test_sweep_end_to_end_then_resumed(agent_world, ray_local, capsys) -> None:  # noqa: F811
    out = run_dir("sweep")
    items = list(agent_world.titles.items())[:4]
    rows = [title_query(d, t) for d, t in items[:2]]
    rows.append(title_query(*items[2]) | {"answer": "a wrong gold answer"})
    rows.append(title_query(*items[3], marker="[fake:never-answer]"))
    queries = write_queries(out / "queries.jsonl", rows)
    with FakeLLMServer() as server:
        sweep = {
            "name": "e2e",
            "out": str(out / "sweep"),
            "queries": str(queries),
            "systems": ["rise", "rise-bm25"],
            "models": ["gpt-5.4-mini"],
            "k": [5, 50],
            "corpora": [{"name": "sample", "docs": str(agent_world.docs), "index": str(agent_world.index)}],
            "run": {
                "workers": 1,
                "concurrency": 4,
                "max_calls": 8,
                "index_backend": "numpy",
                "progress": False,
                "llm": {"base_url": server.base_url, "rpm": 6000},
            },
            "judge": {"model": "gpt-5.4-mini", "base_url": server.base_url, "concurrency": 4},
        }
        config = out / "sweep.yaml"
        config.write_text(yaml.safe_dump({"sweep": sweep}))
        assert eval_sweep_main(["--config", str(config), "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert (result["cells"], result["ran"], result["skipped"], result["incomplete"]) == (4, 4, 0, [])
        cells = sorted((out / "sweep" / "cells").iterdir())
        assert [c.name for c in cells] == [
            "rise-bm25__gpt-5.4-mini__k50__sample",
            "rise-bm25__gpt-5.4-mini__k5__sample",
            "rise__gpt-5.4-mini__k50__sample",
            "rise__gpt-5.4-mini__k5__sample",
        ]
        for cell in cells:
            labels = json.loads((cell / "cell.json").read_text())
            assert labels["system"] in ("rise", "rise-bm25") and labels["k"] in (5, 50)
            assert labels["corpus_docs"] == len(agent_world.titles)
            judgments = {p.stem: json.loads(p.read_text()) for p in (cell / "judgments").glob("*.json")}
            assert len(judgments) == 4
            by_id = {j["query_id"]: j for j in judgments.values()}
            assert by_id[items[0][0]]["correct"] and by_id[items[1][0]]["correct"]
            assert by_id[items[2][0]]["correct"] is False
            assert by_id[items[3][0]]["method"] == "empty" and by_id[items[3][0]]["correct"] is False
        state = json.loads((out / "sweep" / "sweep.json").read_text())
        assert {e["status"] for e in state["cells"].values()} == {"done"}
        md = (out / "sweep" / "report" / "report.md").read_text()
        assert md.count("| gpt-5.4-mini | 50.0 [") == 4  # 2 of 4 right in every cell
        assert "| RISE (K=5) |" in md and "| RISE-BM25 (K=50) |" in md and "max_calls 1" in md
        assert sorted(Path(p).name for p in result["plots"]) == [
            "accuracy_vs_cost.png",
            "accuracy_vs_k.png",
            "gold_in_workspace_step.png",
            "tool_calls.png",
        ]
        for p in result["plots"]:
            assert_png(Path(p))
        sent_agent, sent_judge = len(agent_requests(server)), len(judge_requests(server))
        assert sent_agent > 0 and 0 < sent_judge <= 4 * 3

        # resumed: every cell is skipped and nothing reaches the server
        assert eval_sweep_main(["--config", str(config), "--json"]) == 0
        again = json.loads(capsys.readouterr().out)
        assert (again["ran"], again["skipped"], again["incomplete"]) == (0, 4, [])
        assert len(server.log()) == sent_agent + sent_judge

        # one cell damaged (a lost trajectory and its judgment, the cell not marked done): only it runs again,
        # only for the lost query
        damaged = out / "sweep" / "cells" / "rise__gpt-5.4-mini__k5__sample"
        stem = items[0][0]
        (damaged / "trajectories" / f"{stem}.json").unlink()
        (damaged / "judgments" / f"{stem}.json").unlink()
        del state["cells"][damaged.name]
        (out / "sweep" / "sweep.json").write_text(json.dumps(state))
        before = len(server.log())
        assert eval_sweep_main(["--config", str(config), "--json"]) == 0
        third = json.loads(capsys.readouterr().out)
        assert (third["ran"], third["skipped"], third["incomplete"]) == (1, 3, [])
        new = server.log(before)
        redone = json.loads((damaged / "trajectories" / f"{stem}.json").read_text())
        # the lost trajectory and judgment were paid for once: redone from the replies the cell kept, nothing sent
        assert [e for e in new if e.get("responder") in ("agent", "judge")] == []
        assert redone["model_calls"] > 0 and redone["replayed_usd"] == pytest.approx(redone["cost_usd"])
        assert json.loads((damaged / "judgments" / f"{stem}.json").read_text())["correct"] is True
