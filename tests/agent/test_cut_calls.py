"""Honest costs when a call is cut: a model call that never returns is abandoned at the trajectory's wall clock,
and no reply ever says what it generated, so the trajectory counts it in `cancelled_calls` and the run's cost
(stats, summary line, report) is marked as a lower bound. Every agent request carries the output-token cap, so
one call cannot cost more than it allows. Real runs in process against the fake server over HTTP."""

from __future__ import annotations

import json

from rise_batch.agent.job import run_trajectories, summary_line
from rise_batch.cli import main
from rise_batch.eval.report import write_report
from tests.agent.helpers import read_trajectories, run_config, run_dir, title_query, write_queries


def test_a_call_cut_by_the_wall_clock_is_counted_and_the_cost_is_a_lower_bound(agent_world, fake_server):
    out = run_dir("cut-calls")
    (hung_id, hung_title), (ok_id, ok_title) = list(agent_world.titles.items())[:2]
    rows = [title_query(hung_id, hung_title, "[fake:hang=120]"), title_query(ok_id, ok_title)]
    # the budget leaves the plain query time to answer on a loaded machine; the hang goes on far past it
    cfg = run_config(out / "run", write_queries(out / "q.jsonl", rows), fake_server.base_url, wall_clock_s=8.0)
    stats = run_trajectories(cfg)
    t = read_trajectories(out / "run")
    hung, ok = t[hung_id], t[ok_id]
    assert hung["stop_reason"] == "wall_clock" and hung["model_calls"] == 1
    assert hung["cancelled_calls"] == 1 and hung["cost_usd"] == 0 and hung["usage"]["output_tokens"] == 0
    assert ok["stop_reason"] == "answered" and ok["cancelled_calls"] == 0 and ok["cost_usd"] > 0
    assert stats["cancelled_calls"] == 1 and stats["cost_lower_bound"] is True
    line = summary_line(stats, str(out / "run"))
    assert f" cost_usd>={stats['cost_usd']} cancelled_calls=1 " in line, line

    report = write_report([out / "run"], out / "report")
    assert report["runs"][0]["cost_lower_bound"] is True
    assert "| ≥ $" in (out / "report" / "report.md").read_text()


def test_a_run_without_cut_calls_reports_an_exact_cost(agent_world, fake_server):
    out = run_dir("uncut-calls")
    docid, title = next(iter(agent_world.titles.items()))
    cfg = run_config(out / "run", write_queries(out / "q.jsonl", [title_query(docid, title)]), fake_server.base_url)
    stats = run_trajectories(cfg)
    assert stats["cancelled_calls"] == 0 and stats["cost_lower_bound"] is False
    assert f" cost_usd={stats['cost_usd']} " in summary_line(stats, str(out / "run"))
    report = write_report([out / "run"], out / "report")
    assert report["runs"][0]["cost_lower_bound"] is False
    assert "≥" not in (out / "report" / "report.md").read_text()


def test_agent_requests_carry_the_output_token_cap(agent_world, fake_server):
    """The agent default (16384) when nothing is set, the YAML's value, and the flag's over the YAML's."""
    out = run_dir("max-tokens")
    docid, title = next(iter(agent_world.titles.items()))
    queries = write_queries(out / "q.jsonl", [title_query(docid, title)])
    run_trajectories(run_config(out / "default", queries, fake_server.base_url))
    assert {e["max_tokens"] for e in fake_server.log()} == {16384}

    yaml = out / "run.yaml"
    yaml.write_text(json.dumps({"run": {"llm": {"max_output_tokens": 700}}}))  # JSON is YAML
    argv = ["run", "--config", str(yaml), "--queries", str(queries), "--index", str(agent_world.index)]
    argv += ["--docs", str(agent_world.docs), "--base-url", fake_server.base_url, "--workers", "0"]
    argv += ["--index-backend", "numpy", "--no-progress", "--tpm", "100000000"]
    since = len(fake_server.log())
    assert main([*argv, "--out", str(out / "yaml")]) == 0
    assert {e["max_tokens"] for e in fake_server.log(since)} == {700}
    since = len(fake_server.log())
    assert main([*argv, "--out", str(out / "flag"), "--max-output-tokens", "321"]) == 0
    assert {e["max_tokens"] for e in fake_server.log(since)} == {321}
