"""What the driver knows reaches the actors: the API key exported in the shell that runs `rise-batch ...
--ray-address` is what every actor sends (never written or printed), and a key the endpoint refuses stops the job
with its cause and remedy, leaving the refused documents for a resume with the right key."""

from __future__ import annotations

import pytest

from rise_batch.fake_llm import FakeLLMServer
from rise_batch.structuring.checkpoint import CheckpointStore
from tests.cluster.helpers import KEY, corpus, grep_everywhere, stats_of, structure_args

pytestmark = pytest.mark.slow
N = 40


def test_the_key_in_the_drivers_environment_reaches_every_actor(two_nodes, tmp_path) -> None:
    with FakeLLMServer(require_key=KEY) as server:
        out = tmp_path / "out"
        env = two_nodes.env | {"OPENAI_API_KEY": KEY}
        done = two_nodes.cli(*structure_args(corpus(tmp_path, N), out, server.base_url), env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        stats = stats_of(out)
        assert stats["docs_total"] == N and "error" not in stats["outcomes"], stats["outcomes"]
        assert {e["status"] for e in server.log()} == {200}
    assert grep_everywhere(KEY, [done.stdout, done.stderr], out) == []


def test_a_refused_key_stops_the_job_and_a_resume_with_the_right_key_finishes(two_nodes, tmp_path) -> None:
    with FakeLLMServer(require_key=KEY) as server:
        out = tmp_path / "out"
        args = structure_args(corpus(tmp_path, N), out, server.base_url)
        wrong = two_nodes.cli(*args, env=two_nodes.env | {"OPENAI_API_KEY": "sk-wrong-0123456789"})
        assert wrong.returncode == 2, wrong.stderr[-3000:]
        line = wrong.stderr.strip().splitlines()[-1]
        assert "refused the key in $OPENAI_API_KEY (HTTP 401" in line and "re-run the same command" in line
        assert "sk-wrong-0123456789" not in wrong.stderr + wrong.stdout
        store = CheckpointStore(out)
        assert store.read_rows() == [] and not any(store.is_done(s) for s in range(N // 10))
        refused = server.stats()["requests"]
        assert refused <= 2 * 2 * 4  # the requests in flight when the first 401 came back, at most
        again = two_nodes.cli(*args, env=two_nodes.env | {"OPENAI_API_KEY": KEY})
        assert again.returncode == 0, again.stderr[-3000:]
        stats = stats_of(out)
        assert stats["docs_total"] == N and "error" not in stats["outcomes"], stats["outcomes"]
        assert server.stats()["requests"] - refused == N  # every document once, none paid twice


def test_run_with_a_refused_key_stops_and_a_resume_runs_every_query(two_nodes, agent_world) -> None:
    from rise_batch.fake_llm.agent import AgentResponder
    from rise_batch.fake_llm.chat import FallbackResponder
    from tests.agent.helpers import read_trajectories, run_dir, title_query, write_queries
    from tests.cluster.test_lost_node import run_args

    out = run_dir("cluster-key")
    items = list(agent_world.titles.items())[:8]
    queries = write_queries(out / "q.jsonl", [title_query(f"q{i:02d}", t) for i, (_, t) in enumerate(items)])
    with FakeLLMServer(responders=[AgentResponder(), FallbackResponder()], require_key=KEY) as server:
        args = run_args(queries, out / "run", agent_world, server.base_url)
        wrong = two_nodes.cli(*args, env=two_nodes.env | {"OPENAI_API_KEY": "sk-wrong-0123456789"})
        assert wrong.returncode == 2, wrong.stderr[-3000:]
        assert "refused the key in $OPENAI_API_KEY (HTTP 401" in wrong.stderr.strip().splitlines()[-1]
        assert read_trajectories(out / "run") == {}  # no query has an outcome: the refusal is not theirs
        again = two_nodes.cli(*args, env=two_nodes.env | {"OPENAI_API_KEY": KEY})
        assert again.returncode == 0, again.stderr[-3000:]
    got = read_trajectories(out / "run")
    assert len(got) == len(items) and {t["stop_reason"] for t in got.values()} == {"answered"}
    assert grep_everywhere(KEY, [again.stdout, again.stderr], out) == []
