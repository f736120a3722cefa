"""The agent loop against the fake server over HTTP, with the real tools, sandbox and index: budgets and stop
reasons, answer parsing, DCI's context policy."""

from __future__ import annotations

import asyncio
import tempfile
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from rise_batch.agent.loop import CLEARED, AgentRun, Budget, ContextPolicy, _Context, parse_final, run_agent
from rise_batch.agent.systems import get_system, open_tools
from rise_batch.config import LLMConfig
from rise_batch.index import load_index
from rise_batch.io import read_json, write_json_atomic
from rise_batch.llm.client import LLMClient
from rise_batch.prompts import load_prompt
from rise_batch.space.docstore import DocStore
from rise_batch.space.sandbox import SandboxLimits
from tests.llm.test_foreign_faults import Handler, Script


@pytest.mark.parametrize(
    ("text", "answer", "confidence"),
    [
        ("Explanation: because\nExact Answer: Lyon\nConfidence: 85%", "Lyon", 85.0),
        ("**Explanation:** x\n**Exact Answer:** **Marie Curie**\n**Confidence:** 90 %", "Marie Curie", 90.0),
        ("Exact Answer: 1901\nConfidence: 0.7", "1901", 70.0),
        ("exact answer: lower case works\nconfidence: 150%", "lower case works", 100.0),
        ("I could not find it.", None, None),
        ("Explanation: multi\nline\nExact Answer:\nConfidence: n/a", None, None),
    ],
)
def test_parse_final(text, answer, confidence):
    _, got_answer, got_conf = parse_final(text)
    assert got_answer == answer and got_conf == confidence


def test_dci_context_cuts_results_and_clears_old_ones():
    messages: list[dict] = []
    ctx = _Context(messages, ContextPolicy(max_tool_chars=100, clear_after_chars=250, keep_turns=2))
    ctx.add(1, "a", "x" * 500)
    assert messages[0]["content"].startswith("x" * 100) and "400 more characters" in messages[0]["content"]
    ctx.add(2, "b", "y" * 90)
    ctx.add(3, "c", "z" * 90)  # total now past 250: results of turns <= 1 are cleared
    assert messages[0]["content"] == CLEARED
    assert messages[1]["content"] == "y" * 90 and messages[2]["content"] == "z" * 90
    ctx.add(4, "d", "w" * 90)
    assert [m["content"] == CLEARED for m in messages] == [True, True, False, False]
    assert ctx.chars == sum(len(m["content"]) for m in messages)


def _trajectory(
    agent_world, base_url: str, question: str, budget: Budget, system: str = "rise", seen: list | None = None
) -> AgentRun:
    """One trajectory with the real tools; `seen` receives the tool set (to inspect it afterwards)."""
    spec = get_system(system)
    store = DocStore(agent_world.docs)
    ws_root = Path(tempfile.mkdtemp(prefix="ws-", dir=agent_world.root))
    ws_root.chmod(0o755)
    tools, ws = open_tools(
        spec,
        store,
        lambda: load_index(agent_world.index, backend="numpy"),
        ws_root / "q",
        limits=SandboxLimits(timeout_s=60.0),
    )
    if seen is not None:
        seen.append(tools)

    async def go() -> AgentRun:
        cfg = LLMConfig(base_url=base_url, model="gpt-5.4-mini", max_attempts=2, rpm=100_000, tpm=10**10)
        async with LLMClient(cfg) as client:
            return await run_agent(client, load_prompt(spec.prompt), question, tools, budget, context=spec.context)

    try:
        return asyncio.run(go())
    finally:
        if ws is not None:
            ws.close()


def test_answered_trajectory_records_what_it_saw(agent_world, fake_server):
    docid, title = next(iter(agent_world.titles.items()))
    run = _trajectory(agent_world, fake_server.base_url, f"What is '{title}'?", Budget(max_calls=20))
    assert run.stop_reason == "answered" and run.error is None
    assert [s["tool"] for s in run.steps] == ["search", "bash", "read", "read"]
    assert run.model_calls == 5 and dict(run.tool_calls) == {"search": 1, "bash": 1, "read": 2}
    assert docid in run.retrieved and docid in run.surfaced
    assert run.exact_answer and title.split()[0].lower() in run.final_text.lower()
    assert run.confidence == 85.0
    assert run.input_tokens > run.cached_input_tokens > 0 and run.output_tokens > 0 and run.cost_usd > 0
    assert all(len(s["output"]) <= 2000 for s in run.steps)


def test_the_model_text_of_each_call_is_recorded_and_cut_like_a_tool_output(agent_world, fake_server):
    """A model that writes 2,500 characters before each tool call: each reply is one entry of `calls`, its text cut
    at 2,000 characters with its whole length kept, its tool calls counted; the answering call holds the reply."""
    docid, title = next(iter(agent_world.titles.items()))
    run = _trajectory(agent_world, fake_server.base_url, f"What is '{title}'? [fake:say=2500]", Budget(max_calls=20))
    assert run.stop_reason == "answered" and [s["tool"] for s in run.steps] == ["search", "bash", "read", "read"]
    assert [c["call"] for c in run.calls] == [1, 2, 3, 4, 5] and [c["tool_calls"] for c in run.calls] == [1] * 4 + [0]
    for i, c in enumerate(run.calls[:4]):
        assert c["text"].startswith(f"Turn {i + 1}: I call {run.steps[i]['tool']} to look for {title!r}.")
        assert len(c["text"]) == 2000 and c["text_chars"] == 2500 and "reasoning" not in c
    assert run.calls[-1]["text"] == run.final_text and run.calls[-1]["text_chars"] == len(run.final_text)


def test_never_answering_model_is_cut_at_max_calls(agent_world, fake_server):
    question = "What is 'Anarchism'? [fake:never-answer]"
    run = _trajectory(agent_world, fake_server.base_url, question, Budget(max_calls=7))
    assert run.stop_reason == "max_calls"
    assert run.model_calls == 7 and sum(run.tool_calls.values()) == 7
    assert run.final_text == "" and run.exact_answer is None


def _sleepers(tag: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if cmd and cmd[0].endswith("sleep") and tag in cmd:
            out.append(p)
    return out


# How far past its budget a trajectory may end before the test calls it a hang: generous, so that a loaded machine
# (load 20 and more) never fails these tests, and still well short of the sleeps and hangs they cut (93 s, 120 s).
# How close to the budget it ends is measured by bench/trajectories.py (its overshoot), not asserted.
HANG_MARGIN_S = 30.0


def test_sleeping_tool_is_cut_at_the_wall_clock_budget(agent_world, fake_server):
    budget = Budget(max_calls=20, wall_clock_s=2.0)
    run = _trajectory(agent_world, fake_server.base_url, "What is 'Anarchism'? [fake:tool-sleep=93.17]", budget)
    assert run.stop_reason == "wall_clock"
    assert run.steps[0]["arguments"] == {"command": "sleep 93.17"}
    assert "[killed: exceeded" in run.steps[0]["output"]
    assert run.elapsed_s < budget.wall_clock_s + HANG_MARGIN_S
    assert _sleepers("93.17") == []  # the sandbox's process group went with the deadline


def test_the_per_call_cap_leaves_the_sandbox_limits_unchanged(agent_world, fake_server):
    """The bash cap is min(the sandbox's limit, the time left), passed per call: the sandbox's limits are unchanged
    after the trajectory, and the command was still killed at the deadline, not at the sandbox's 60 s."""
    seen: list = []
    # 8 s, not 2: on a loaded machine the first model call and the sandbox start can take most of a short budget,
    # and the test needs a bash call that starts with time left
    budget = Budget(max_calls=20, wall_clock_s=8.0)
    run = _trajectory(
        agent_world, fake_server.base_url, "What is 'Anarchism'? [fake:tool-sleep=93.19]", budget, seen=seen
    )
    assert seen[0].sandbox.limits == SandboxLimits(timeout_s=60.0)  # not left at the last call's cap
    cap = float(run.steps[0]["output"].split("[killed: exceeded the ")[1].split(" s ")[0])
    assert 0.25 <= cap < budget.wall_clock_s  # the time left when the call started, not the sandbox's 60 s
    assert _sleepers("93.19") == []


def test_hanging_server_is_cut_at_the_wall_clock_budget(agent_world, fake_server):
    budget = Budget(max_calls=20, wall_clock_s=2.0, call_timeout_s=600)
    run = _trajectory(agent_world, fake_server.base_url, "What is 'Anarchism'? [fake:hang=120]", budget)
    assert run.stop_reason == "wall_clock" and run.model_calls == 1
    assert run.elapsed_s < budget.wall_clock_s + HANG_MARGIN_S


def test_api_error_and_context_overflow(agent_world, fake_server):
    run = _trajectory(agent_world, fake_server.base_url, "What is 'Anarchism'? [fake:error=2]", Budget())
    assert run.stop_reason == "api_error" and run.model_calls == 3 and "400" in (run.error or "")
    assert run.steps  # what it did before the error is kept
    run = _trajectory(agent_world, fake_server.base_url, "What is 'Anarchism'? [fake:overflow]", Budget())
    assert run.stop_reason == "context_overflow" and run.model_calls == 1


def test_dci_runs_with_its_context_policy(agent_world, fake_server):
    run = _trajectory(agent_world, fake_server.base_url, "What is 'Anarchism'?", Budget(max_calls=10), system="dci")
    assert run.stop_reason == "answered"
    assert [s["tool"] for s in run.steps] == ["bash", "read", "read"]
    assert "enwiki-12" in run.surfaced and not run.retrieved


@pytest.mark.parametrize(
    "raw",
    ['{"path": "\\ud800"}', '{"path": "a.txt", "offset": 1e400}', '{"path": "a.txt", "limit": NaN}', '{"path": ["a"]}'],
)
def test_bad_tool_arguments_come_back_to_the_model(agent_world, fake_server, raw, tmp_path):
    """Arguments a tool cannot use are an error text in the conversation: the trajectory goes on and answers, and
    its record (with the arguments as sent) is written by the trajectory writer."""
    question = f"What is 'Anarchism'? [fake:raw-call=read:{raw}]"
    run = _trajectory(agent_world, fake_server.base_url, question, Budget(max_calls=20))
    assert run.stop_reason == "answered" and run.error is None, run.error
    first = run.steps[0]
    assert first["tool"] == "read" and first["output"].startswith("error: "), first
    assert [s["tool"] for s in run.steps[1:]] == ["search", "bash", "read", "read"]
    write_json_atomic(tmp_path / "trajectory.json", {"steps": run.steps})
    assert read_json(tmp_path / "trajectory.json")["steps"][0]["output"] == first["output"]


def test_unusable_replies_are_paid_and_named_in_the_trajectory(agent_world):
    """A server (a bare stdlib one) whose 2xx bodies break after their usage: the call stops after the same body
    twice (not 8 tries), and the trajectory counts what both were billed and says why it ended."""
    script = Script()
    script.todo = ["cut-after-usage"] * 8

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), type("Scripted", (Handler,), {"script": script}))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        run = _trajectory(agent_world, url, "What is it?", Budget(max_calls=5))
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert script.seen == ["cut-after-usage"] * 2
    assert run.stop_reason == "api_error" and "the response body is not JSON" in (run.error or "")
    # each body says 10 + 2 tokens, under half the engine's own count of the request it answers: billed at that
    # count (money/usage.py), never at what the body claims
    assert run.input_tokens > 20 and run.output_tokens >= 4 and run.cost_usd > 0 and not run.retryable
