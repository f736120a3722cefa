"""`rise-batch judge` end to end: the real openai client against the fake server's grader over HTTP."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from rise_batch.cli import main
from rise_batch.config import LLMConfig
from rise_batch.eval.judge_batch import judge_run_batch
from rise_batch.eval.report import summarize_run
from rise_batch.fake_llm import FakeLLMServer
from tests.eval.helpers import trajectory, write_run


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as s:
        yield s


def judge_requests(server: FakeLLMServer) -> list[dict]:
    return [e for e in server.log() if e.get("responder") == "judge"]


def make_run(root: Path, queries: Path | None = None) -> Path:
    t = [
        trajectory("exact", exact_answer="The Eiffel Tower", answer="Eiffel Tower", confidence=95),
        trajectory("para", exact_answer="Paris, France", answer="Paris", confidence=70),
        trajectory("wrong", exact_answer="Lyon", answer="Marseille", confidence=40),
        trajectory("prose", final_text="After reading, I believe it is 1912.", answer="1913"),
        trajectory("budget", stop_reason="max_calls", final_text="still searching", answer="x"),
        trajectory("nogold", exact_answer="something"),
        trajectory("squad", exact_answer="Amazonia", confidence=100),  # gold answers only in the query file
    ]
    return write_run(root, t, queries=str(queries) if queries else None)


def read_judgments(run: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((run / "judgments").glob("*.json"))}


def test_judge_end_to_end_resume_and_force(tmp_path: Path, server: FakeLLMServer, capsys) -> None:
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"query_id": "squad", "query": "q?", "answers": ["Amazon Jungle", "Amazonia"]}))
    run = make_run(tmp_path / "run", queries)
    argv = ["judge", str(run), "--model", "gpt-5.4-mini", "--base-url", server.base_url, "--concurrency", "3"]
    assert main(argv) == 0
    j = read_judgments(run)
    assert set(j) == {"exact", "para", "wrong", "prose", "budget", "squad"}  # nogold: nothing to compare with
    assert {k: v["method"] for k, v in j.items()} == {
        "exact": "exact",
        "para": "llm",
        "wrong": "llm",
        "prose": "llm",
        "budget": "empty",
        "squad": "exact",
    }
    assert {k: v["correct"] for k, v in j.items()} == {
        "exact": True,
        "para": True,
        "wrong": False,
        "prose": False,
        "budget": False,
        "squad": True,
    }
    assert j["para"]["extracted_final_answer"] == "Paris, France" and j["para"]["confidence"] == 70.0
    assert j["prose"]["confidence"] == 100.0  # none stated
    for name in ("para", "wrong", "prose"):
        assert j[name]["parse_error"] is None and j[name]["judge_model"] == "gpt-5.4-mini"
        assert j[name]["usage"]["input_tokens"] > 0 and j[name]["cost_usd"] > 0
    assert j["exact"]["cost_usd"] == 0 and j["budget"]["cost_usd"] == 0
    trajectories = {p.stem: json.loads(p.read_text()) for p in (run / "trajectories").glob("*.json")}
    assert all(t["cost_usd"] == 0.0 for t in trajectories.values())  # judge cost never lands on the agent
    assert len(judge_requests(server)) == 3
    assert "llm 3, empty 1, no gold 1, failed 0" in capsys.readouterr().out

    before = {k: v for k, v in j.items()}
    assert main(argv) == 0  # resumed: nothing left to judge
    assert len(judge_requests(server)) == 3
    assert read_judgments(run) == before
    assert "6 already judged" in capsys.readouterr().out

    (run / "judgments" / "wrong.json").unlink()  # an interrupted run: only the missing one is graded, its paid
    assert main(argv) == 0  # reply answered from the run directory's kept replies (money/replies.py): not bought again
    again = read_judgments(run)
    assert len(judge_requests(server)) == 3 and again["wrong"]["replayed_usd"] == again["wrong"]["cost_usd"] > 0
    assert again == before | {"wrong": before["wrong"] | {"replayed_usd": again["wrong"]["cost_usd"]}}

    assert main([*argv, "--force"]) == 0  # the same grader and prompt: the same requests, answered from kept replies
    regraded = read_judgments(run)
    assert len(judge_requests(server)) == 3 and {k: v["correct"] for k, v in regraded.items()} == {
        k: v["correct"] for k, v in before.items()
    }
    shutil.rmtree(run / "spend" / "replies")  # what buys fresh answers
    assert main([*argv, "--force"]) == 0
    assert len(judge_requests(server)) == 6


def test_judge_retries_through_server_faults(tmp_path: Path) -> None:
    t = [trajectory(f"q{i}", exact_answer=f"answer {i}", answer=f"gold {i % 2}") for i in range(12)]
    run = write_run(tmp_path / "run", t)
    with FakeLLMServer(p429=0.3, p500=0.2, retry_after_ms=1, seed=3, max_faults_per_key=1) as s:
        argv = ["judge", str(run), "--model", "gpt-5.4-mini", "--base-url", s.base_url]
        assert main(argv) == 0
        statuses = {e["status"] for e in s.log()}
    j = read_judgments(run)
    assert len(j) == 12 and all(v["method"] == "llm" and v["correct"] is False for v in j.values())
    assert {429, 500} <= statuses


def test_failed_calls_leave_no_judgment_and_exit_nonzero(tmp_path: Path, capsys) -> None:
    run = write_run(tmp_path / "run", [trajectory("q", exact_answer="a", answer="b")])
    with FakeLLMServer(p400=1.0) as s:
        assert main(["judge", str(run), "--model", "m", "--base-url", s.base_url]) == 1
    assert not (run / "judgments" / "q.json").exists()
    assert "re-run the same command" in capsys.readouterr().out


def test_a_rewritten_trajectory_is_judged_again_and_stale_ones_are_left_out(tmp_path: Path, server) -> None:
    run = write_run(
        tmp_path / "run", [trajectory("a", exact_answer="x", answer="y"), trajectory("b")], config_hash="cfg"
    )
    argv = ["judge", str(run), "--model", "gpt-5.4-mini", "--base-url", server.base_url]
    assert main(argv) == 0
    assert read_judgments(run)["a"]["correct"] is False
    path = run / "trajectories" / "a.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"exact_answer": "y", "final_text": "Exact Answer: y"}))
    stale = run / "trajectories" / "b.json"
    stale.write_text(json.dumps(json.loads(stale.read_text()) | {"config_hash": "old"}))
    assert main(argv) == 0
    j = read_judgments(run)
    assert j["a"]["correct"] is True and j["a"]["method"] == "exact"
    s = summarize_run(run)
    assert (s["n_queries"], s["n_judged"], s["accuracy"]) == (1, 1, 1.0)


def test_batch_mode_grades_the_same_at_half_price_and_resumes_without_resubmitting(tmp_path: Path) -> None:
    online, batch = make_run(tmp_path / "online"), make_run(tmp_path / "batch")
    with FakeLLMServer() as s:
        base = ["--model", "gpt-5.4-mini", "--base-url", s.base_url]
        assert main(["judge", str(online), *base]) == 0
        s.batch_api.configure(hold=True)  # the batch stays in progress: the driver is stopped while waiting
        llm = LLMConfig(base_url=s.base_url, model="gpt-5.4-mini")
        with pytest.raises(TimeoutError):
            asyncio.run(asyncio.wait_for(judge_run_batch(batch, llm, poll_s=0.01), timeout=1.0))
        assert s.batch_api.stats()["batches_created"] == 1 and not (batch / "judgments" / "para.json").exists()
        s.batch_api.configure(hold=False)
        assert main(["judge", str(batch), *base, "--mode", "batch", "--poll-s", "0.01"]) == 0
        assert s.batch_api.stats()["batches_created"] == 1  # the resumed driver adopted its batch
        a, b = read_judgments(online), read_judgments(batch)
        assert {k: v["correct"] for k, v in a.items()} == {k: v["correct"] for k, v in b.items()}
        for stem in ("para", "wrong", "prose"):
            assert b[stem]["method"] == "llm" and b[stem]["usage"] == a[stem]["usage"]
            assert b[stem]["cost_usd"] == pytest.approx(a[stem]["cost_usd"] / 2)
        (batch / "judgments" / "wrong.json").unlink()
        assert main(["judge", str(batch), *base, "--mode", "batch", "--poll-s", "0.01"]) == 0
        assert read_judgments(batch)["wrong"]["correct"] is False
        assert s.batch_api.stats()["batches_created"] == 2  # only the missing one, as a new group


def test_a_judgment_gone_from_the_run_directory_is_an_error(tmp_path: Path, server: FakeLLMServer) -> None:
    """The judge counts what it wrote, then checks the run directory holds it: a judgment that is not there when it
    looks (written to storage the next stage does not read) fails the command instead of a summary that counts it."""
    from rise_batch.errors import StorageError
    from rise_batch.eval.judging import judge_run_sync

    run = make_run(tmp_path / "run")
    llm = LLMConfig(base_url=server.base_url, model="gpt-5.4-mini", concurrency=2)

    def vanish(judgment: dict) -> None:
        if judgment["query_id"] == "wrong":
            (run / "judgments" / "wrong.json").unlink()

    with pytest.raises(StorageError, match=r"judgments: 3 of 7 trajectories have no judgment, 2 without a gold .*"
                       r"explain only 2 \(missing among: nogold, squad, wrong\)"):  # fmt: skip
        judge_run_sync(run, llm, on_judged=vanish)
    assert sorted(read_judgments(run)) == ["budget", "exact", "para", "prose"]


def test_batch_mode_on_a_run_in_object_storage_resumes_from_the_bucket(tmp_path: Path, s3) -> None:
    """The batch manifest and files live in the run directory, in the bucket too: a driver stopped while its batch
    is in progress is resumed by another that finds the batch there and adopts it (none created twice)."""
    from rise_batch.storage import location

    local, ref = make_run(tmp_path / "local"), make_run(tmp_path / "ref")
    remote = location(s3.uri()) / "run"
    for f in local.rglob("*.json"):
        (remote / f.relative_to(local).as_posix()).write_bytes(f.read_bytes())
    with FakeLLMServer() as s:
        base = ["--model", "gpt-5.4-mini", "--base-url", s.base_url, "--mode", "batch", "--poll-s", "0.01"]
        assert main(["judge", str(ref), *base]) == 0
        s.batch_api.configure(hold=True)
        llm = LLMConfig(base_url=s.base_url, model="gpt-5.4-mini")
        with pytest.raises(TimeoutError):
            asyncio.run(asyncio.wait_for(judge_run_batch(str(remote), llm, poll_s=0.01), timeout=1.0))
        assert (remote / "judge_batches" / "batches.json").is_file()
        s.batch_api.configure(hold=False)
        assert main(["judge", str(remote), *base]) == 0
        assert s.batch_api.stats()["batches_created"] == 2  # the reference's and the bucket's, adopted on resume
    got = {p.stem: json.loads(p.read_text()) for p in (remote / "judgments").glob("*.json")}
    want = read_judgments(ref)
    assert {k: v["correct"] for k, v in got.items()} == {k: v["correct"] for k, v in want.items()} and len(got) == 5
    assert not any(p.name.startswith("s3") for p in Path.cwd().iterdir())
