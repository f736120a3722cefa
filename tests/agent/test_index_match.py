"""A run over an index and a docs directory of different corpora is refused before any model call; a matching pair
runs, and `run` and `judge` label costs computed against the fake server as simulated."""

from __future__ import annotations

import json

import pytest

from rise_batch.agent.job import run_trajectories
from rise_batch.cli import main
from rise_batch.config import ConfigError
from rise_batch.index import build_index
from tests.agent.helpers import N_DOCS, run_config, run_dir, title_query, write_queries
from tests.conftest import sample_rows, write_jsonl


@pytest.fixture(scope="module")
def foreign_index(agent_world):
    """A real BM25 index over other articles of the sample than the ones the shared docs directory holds."""
    root = run_dir("foreign-index")
    corpus = write_jsonl(root / "other.jsonl", sample_rows()[N_DOCS : N_DOCS + 20])
    build_index(corpus, root / "index", workers=1)
    return root / "index"


def test_index_of_another_corpus_is_refused_before_any_call(agent_world, fake_server, foreign_index, capsys):
    out = run_dir("foreign-run")
    docid, title = next(iter(agent_world.titles.items()))
    queries = write_queries(out / "q.jsonl", [title_query(docid, title)])
    for system in ("rise", "retrieval-agent"):
        cfg = run_config(out / system, queries, fake_server.base_url, system=system, index=str(foreign_index))
        with pytest.raises(ConfigError, match=r"do not hold the same documents: 20 of the index's 20 docids"):
            run_trajectories(cfg)
    argv = ["run", "--queries", str(queries), "--system", "rise", "--index", str(foreign_index), "--no-progress"]
    argv += ["--docs", str(agent_world.docs), "--out", str(out / "cli"), "--base-url", fake_server.base_url]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "structure --index" in err and str(foreign_index) in err
    assert fake_server.stats()["requests"] == 0  # nothing was paid for
    assert not list((out / "rise").glob("trajectories/*.json"))


def test_matching_index_runs_and_cli_labels_simulated_cost(agent_world, fake_server, capsys):
    out = run_dir("matching-run")
    docid, title = next(iter(agent_world.titles.items()))
    queries = write_queries(out / "q.jsonl", [title_query(docid, title)])
    argv = ["run", "--queries", str(queries), "--system", "rise", "--index", str(agent_world.index)]
    argv += ["--docs", str(agent_world.docs), "--out", str(out / "run"), "--base-url", fake_server.base_url]
    argv += ["--workers", "0", "--index-backend", "numpy", "--no-progress", "--tpm", "100000000"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    summary = [line for line in printed.splitlines() if line.startswith("run system=")]
    assert summary and "cost_usd=" in summary[0] and "(simulated:" in summary[0] and len(summary) == 1
    assert fake_server.stats()["requests"] > 0
    assert main([*argv, "--json"]) == 0  # the stats for scripts instead of the line (the run resumes: all done)
    assert json.loads(capsys.readouterr().out)["cost_simulated"] is True
    main(["judge", str(out / "run"), "--model", "gpt-5.4-mini", "--base-url", fake_server.base_url, "--json"])
    printed = capsys.readouterr().out
    judged = [line for line in printed.splitlines() if "judge cost $" in line]
    assert judged and judged[0].endswith(")") and "(simulated:" in judged[0], printed
    assert '"cost_simulated": true' in printed
