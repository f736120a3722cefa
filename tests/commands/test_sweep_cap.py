"""`rise-batch sweep --max-cost` for real: one cap on the whole sweep, its cells' agents and its judge, checked per
call mid-run (the fake server over HTTP, the CLI in process), against what the server billed and what the files
record; a higher cap resumes without paying anything twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rise_batch.cli import main
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.money.spent import spent_usd
from tests.agent.conftest import agent_world  # noqa: F401 - the shared docs + index world
from tests.agent.helpers import run_dir, title_query, write_queries
from tests.agent.test_cost_cap import billed  # the server's bill at the table's prices
from tests.commands.test_sweep_command import sweep_config


def files(out: Path, kind: str) -> dict[Path, dict]:
    return {p: json.loads(p.read_text()) for p in (out / "cells").rglob(f"{kind}/*.json")}


def recorded(out: Path) -> float:
    """The sweep's total: its cells' spend journals (money/spent.py), the Batch API's judgments from their files."""
    return spent_usd(out)


@pytest.mark.parametrize(
    ("workers", "mode"), [(0, "online"), (2, "online"), (2, "batch")], ids=["in-process", "ray", "ray-batch-judge"]
)
def test_max_cost_caps_the_whole_sweep_mid_run_and_a_higher_cap_resumes(
    agent_world,  # noqa: F811
    capsys,
    request,
    workers: int,
    mode: str,
) -> None:
    """On Ray the cells' calls reserve from one BudgetActor, which the driver's judgings reserve from too (a batch
    judging holds its requests' worst cases there before it submits them)."""
    if workers:
        request.getfixturevalue("ray_local")
    d = run_dir(f"sweep-cap-{workers}-{mode}")
    rows = [
        title_query(doc, t, f"[fake:calls={2 + 3 * (i % 4)}]")
        for i, (doc, t) in enumerate(list(agent_world.titles.items())[:8])
    ]
    q = write_queries(d / "q.jsonl", rows)
    with FakeLLMServer() as server:
        cfg = sweep_config(d / "s.yaml", str(d / "out"), str(q), str(agent_world.docs), str(agent_world.index),
                           server.base_url)  # fmt: skip
        data = yaml.safe_load(cfg.read_text())  # reply caps: what each call reserves (its worst case)
        data["sweep"]["run"]["llm"]["max_output_tokens"] = 2000
        data["sweep"]["judge"]["max_output_tokens"] = 500
        data["sweep"]["run"]["workers"] = workers
        data["sweep"]["judge"] |= {"mode": mode, "poll_s": 0.01}
        cfg.write_text(yaml.safe_dump(data))
        cap = 0.06
        assert main(["sweep", str(cfg), "--max-cost", str(cap), "--json"]) == 3
        captured = capsys.readouterr()
        err, stopped = captured.err, json.loads(captured.out)  # --json prints the summary at the cap too
        line = [x for x in err.splitlines() if "stopped at the cost limit" in x]
        assert len(line) == 1 and f"--max-cost ${cap:.4f}" in line[0] and "higher --max-cost" in line[0], err
        assert "Traceback" not in err
        first = recorded(d / "out")
        assert 0 < first <= cap and billed(server) <= cap
        assert stopped["exit_code"] == 3 and stopped["cost_usd"] == pytest.approx(first, abs=1e-6)
        assert stopped["cells"] == 2 and stopped["incomplete"]
        if mode == "online":  # the server's log holds each online reply (batch results are billed at half price)
            assert first == pytest.approx(billed(server), abs=1e-6)
        trajectories = files(d / "out", "trajectories")
        assert len(trajectories) < 16  # no new trajectory started once a call was refused
        for t in trajectories.values():
            if t["stop_reason"] == "budget":
                assert t["retryable"] is True and t["cost_usd"] > 0
        kept = {p: t for p, t in trajectories.items() if not t.get("retryable")}
        judged = files(d / "out", "judgments")

        mark = len(server.log())
        assert main(["sweep", str(cfg), "--max-cost", "5", "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["incomplete"] == []
        after = files(d / "out", "trajectories")
        assert len(after) == 16 and all(after[p] == t for p, t in kept.items())  # finished ones never run again
        assert all(files(d / "out", "judgments")[p] == j for p, j in judged.items())  # nor graded again
        total = recorded(d / "out")
        if mode == "online":
            assert total == pytest.approx(first + billed(server, mark), abs=1e-5)
        assert result["cost_usd"] == pytest.approx(total, abs=1e-5)
    with capsys.disabled():
        print(
            f"\nsweep cap ${cap}, workers={workers} judge {mode}: capped run recorded ${first:.4f}; "
            f"resumed to ${total:.4f}"
        )


def test_an_unpriced_model_under_a_cap_is_refused_before_anything_is_sent(agent_world, capsys) -> None:  # noqa: F811
    d = run_dir("sweep-cap-unpriced")
    q = write_queries(d / "q.jsonl", [title_query(doc, t) for doc, t in list(agent_world.titles.items())[:2]])
    with FakeLLMServer() as server:
        cfg = sweep_config(d / "s.yaml", str(d / "out"), str(q), str(agent_world.docs), str(agent_world.index),
                           server.base_url)  # fmt: skip
        data = yaml.safe_load(cfg.read_text())
        data["sweep"]["models"] = ["my-own-model"]
        cfg.write_text(yaml.safe_dump(data))
        assert main(["sweep", str(cfg), "--max-cost", "1"]) == 2
        err = capsys.readouterr().err
        assert "my-own-model" in err and "Traceback" not in err and not server.log()
        assert not (d / "out" / "cells").exists()
