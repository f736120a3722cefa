"""`run --max-cost` and `run --plan`, for real: the CLI in process, the fake server over HTTP, real Ray actors.

The cap is checked against what the server billed (every 2xx reply's tokens at the price table's prices), not only
against what the run recorded: a cap that holds on paper but not on the bill would be no cap.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rise_batch.cli import main
from rise_batch.llm.pricing import PriceTable
from tests.agent.helpers import read_trajectories, run_dir, title_query, world, write_queries

MODEL = "gpt-5.4-mini"


def billed(server, since: int = 0) -> float:
    """Dollars the fake server's 2xx chat replies cost at the table's prices."""
    prices = PriceTable.load()
    return sum(
        prices.cost(MODEL, e["prompt_tokens"], e["cached_tokens"], e["completion_tokens"])
        for e in server.log(since)
        if e.get("status") == 200 and "prompt_tokens" in e
    )


def recorded(out: Path) -> float:
    return sum(t["cost_usd"] + t.get("earlier_runs", {}).get("cost_usd", 0.0) for t in read_trajectories(out).values())


def queries(name: str, n: int) -> Path:
    """`n` questions the scripted agent answers in unequal numbers of calls (2 to 11 tool turns)."""
    items = list(world().titles.items())[:n]
    rows = [title_query(d, t, f"[fake:calls={2 + 3 * (i % 4)}]") for i, (d, t) in enumerate(items)]
    return write_queries(world().root / f"{name}.jsonl", rows)


def argv(out: Path, q: Path, base_url: str, *more: str) -> list[str]:
    w = world()
    return [
        "run", "--queries", str(q), "--out", str(out), "--docs", str(w.docs), "--index", str(w.index),
        "--index-backend", "numpy", "--no-progress", "--base-url", base_url, "--model", MODEL, "--rpm", "1000000",
        "--tpm", "10000000000", "--max-output-tokens", "2000", *more,
    ]  # fmt: skip


def test_max_cost_on_two_ray_workers_is_never_passed_and_a_higher_cap_resumes(
    agent_world, fake_server, ray_local, capsys
):
    out, q = run_dir("capped"), queries("capped", 12)
    assert main(argv(out, q, fake_server.base_url, "--workers", "2", "--concurrency", "4", "--max-cost", "0.1")) == 3
    err = capsys.readouterr().err
    assert "stopped at the cost limit" in err and "--max-cost $0.1000" in err and "higher --max-cost" in err
    assert len([line for line in err.splitlines() if line.startswith("rise-batch run:")]) == 1, err
    first = read_trajectories(out)
    assert billed(fake_server) <= 0.1 and recorded(out) == pytest.approx(billed(fake_server), abs=1e-6)
    assert len(first) < 12  # no new trajectory started once a call was refused
    cut = {k: t for k, t in first.items() if t["stop_reason"] == "budget"}
    assert cut, "a trajectory in flight at the cap ends as budget"
    for t in cut.values():
        assert t["retryable"] is True and t["model_calls"] > 0 and t["cost_usd"] > 0
    paid_before = billed(fake_server)

    mark = len(fake_server.log())
    assert main([*argv(out, q, fake_server.base_url, "--workers", "2", "--concurrency", "4", "--max-cost", "5"),
                 "--json"]) == 0  # fmt: skip
    stats = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    done = read_trajectories(out)
    assert stats["stop_reasons"] == {"answered": 12}
    assert stats["earlier_cost_usd"] == pytest.approx(sum(t["cost_usd"] for t in cut.values()), abs=1e-6)
    for k in cut:
        assert done[k]["earlier_runs"]["runs"] == 1 and "retryable" not in done[k]
    finished_first = {k for k, t in first.items() if not t.get("retryable")}
    assert all(done[k] == first[k] for k in finished_first)  # never run again
    assert stats["spent_usd"] == pytest.approx(paid_before + billed(fake_server, mark), abs=1e-5)


def test_max_cost_reached_before_anything_starts_runs_nothing(agent_world, fake_server, capsys):
    out, q = run_dir("capped0"), queries("capped0", 4)
    assert main(argv(out, q, fake_server.base_url, "--workers", "0", "--max-cost", "0.000001")) == 3
    assert "stopped at the cost limit" in capsys.readouterr().err
    assert billed(fake_server) == 0 and read_trajectories(out) == {}


def test_json_is_printed_at_the_cap_with_what_the_run_spent(agent_world, fake_server, capsys):
    """`--json` prints the run's stats when it stops at --max-cost (exit 3), not only when it finishes."""
    out, q = run_dir("capped-json"), queries("capped-json", 6)
    assert main(argv(out, q, fake_server.base_url, "--workers", "0", "--concurrency", "2", "--max-cost", "0.03",
                     "--json")) == 3  # fmt: skip
    captured = capsys.readouterr()
    stats = json.loads(captured.out)
    assert stats["exit_code"] == 3 and "stopped at the cost limit" in stats["message"] in captured.err
    assert 0 < stats["spent_usd"] == pytest.approx(recorded(out), abs=1e-6) and stats["queries"] == 6
    assert stats["stop_reasons"].get("budget") and stats["cost_simulated"] is True


def test_an_unpriced_model_is_refused_for_max_cost_and_plan(agent_world, fake_server, capsys):
    q = queries("unpriced", 2)
    for flags in (["--max-cost", "1"], ["--plan"]):
        out = run_dir("unpriced")
        bad = [*argv(out, q, fake_server.base_url, "--workers", "0", *flags)]
        bad[bad.index(MODEL)] = "my-own-model"
        assert main(bad) == 2
        assert "my-own-model" in capsys.readouterr().err and not fake_server.log()


def test_plan_runs_a_seeded_pilot_prints_the_rest_and_the_run_resumes_past_it(agent_world, fake_server, capsys):
    out, q = run_dir("planned"), queries("planned", 12)
    base = argv(out, q, fake_server.base_url, "--workers", "0", "--concurrency", "3")
    assert main([*base, "--plan", "--pilot", "5", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert plan["pilot_queries"] == 5 and plan["remaining_queries"] == 7
    c = plan["cost_usd"]
    assert 0 < c["low"] <= c["estimate"] <= c["high"] and plan["small_pilot"] is True
    assert plan["hours"]["low"] <= plan["hours"]["estimate"] <= plan["hours"]["high"]
    for k in ("input", "cached_input", "output"):
        assert plan["tokens"][k]["estimate"] >= 0
    assert plan["model_calls"]["estimate"] > 0
    pilot = read_trajectories(out)
    assert len(pilot) == 5 and plan["pilot_cost_usd"] == pytest.approx(billed(fake_server), abs=1e-5)

    mark = len(fake_server.log())
    assert main([*base, "--plan", "--pilot", "5"]) == 0  # the pilot is done: nothing runs, the plan is printed
    text = capsys.readouterr().out
    assert "5 pilot trajectories finished" in text and "95% prediction interval" in text and "a rough figure" in text
    assert len(fake_server.log()) == mark

    assert json.loads((out / "plan.json").read_text())["cost_usd"] == c  # kept for the run that follows
    assert main(base) == 0  # the run resumes past the pilot
    done = read_trajectories(out)
    assert len(done) == 12 and all(done[k] == pilot[k] for k in pilot)
    asked = {e["head"] for e in fake_server.log(mark)}
    assert not any(t["query"][:30] in h for t in pilot.values() for h in asked)
    # then one line: the plan beside what the rest cost (what the server billed after the pilot)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    rest = billed(fake_server, mark)
    assert line.startswith(f"planned ${c['estimate']:.4f} [${c['low']:.4f}, ${c['high']:.4f}], spent $"), line
    assert float(line.split("spent $")[1].split()[0]) == pytest.approx(rest, abs=1e-4)
    assert "on the 7 queries after the pilot" in line


def test_a_pilot_under_five_queries_prints_the_estimate_and_why_there_is_no_interval(agent_world, fake_server, capsys):
    out, q = run_dir("planned1"), queries("planned1", 6)
    base = argv(out, q, fake_server.base_url, "--workers", "0", "--concurrency", "2")
    assert main([*base, "--plan", "--pilot", "2", "--json"]) == 0
    c = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["cost_usd"]
    assert c["estimate"] > 0 and c["low"] is None and c["high"] is None and "too few" in c["no_interval"]
    assert main([*base, "--plan", "--pilot", "2"]) == 0
    text = capsys.readouterr().out
    assert "no interval: a pilot of 2 queries is too few to bound the rest (an interval needs 5)" in text
    assert "95%" not in text
    assert main(base) == 0
    assert "planned $" in capsys.readouterr().out.strip().splitlines()[-1]
