"""One agent trajectory: the model proposes tool calls, the system's tools answer, until it answers or a budget ends.

The loop is pure apart from its two collaborators, an LLM client (`await client.complete(messages, timeout=...,
tools=...)`) and a ToolSet, so it runs the same in a test, in a CLI process and inside a Ray actor. Both budgets
are enforced here, where the waiting happens: every model call gets `timeout=min(remaining, cap)` and is also
abandoned at the deadline (retries included), and every tool call is bounded by the remaining time (a sandboxed
command is killed at the deadline, not at its own 60 s cap). No final answer is forced: a trajectory that runs
out of budget is a no-answer labelled with why.

The caller owns the `AgentRun` record and passes it in, so a trajectory cancelled from outside (a watchdog)
still leaves everything it did behind. A model call the loop stops waiting for (the wall clock, a cancel from
outside) is counted in `cancelled_calls`: the provider bills what it generated, but no reply ever says how much, so
the trajectory's usage and cost leave it out and are a lower bound. A model call that failed for a transient
reason (connection refused, 5xx, a lost rate limiter, after every attempt) ends the trajectory as `api_error` marked
`retryable`: a resume runs it again. A refused key (KeyRefused) is not the query's outcome: it passes through and
stops the job. A call the run's `--max-cost` refuses (BudgetExceeded: its worst case would not fit) was never sent:
the trajectory ends as `budget`, marked `retryable`, with `budget_stop` holding the refusal for the caller.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from rise_batch.agent.context_policy import ContextPolicy as ContextPolicy  # re-exported
from rise_batch.llm.errors import LLMError
from rise_batch.llm.retry import is_overflow_message, is_transient
from rise_batch.llm.spend import BudgetExceeded
from rise_batch.space.tools import ToolResult, ToolSet

STEP_OUTPUT_CHARS = 2000  # what a trajectory file keeps of each tool output
TOOL_SLACK_S = 0.5  # a tool killed at the deadline needs a moment to report back
# The HTTP timeout of a model call is set this much past the deadline, so that the deadline (our cancel) always
# fires first: when httpx's own timeout (an anyio cancel scope) fires at the same instant as an asyncio cancel,
# anyio can swallow the latter, and the client then retries past the budget.
HTTP_TIMEOUT_MARGIN_S = 1.0
CANCEL_GRACE_S = 1.0  # how long a cancelled call may take to unwind before the loop stops waiting for it


@dataclass(frozen=True)
class Budget:
    """Per-trajectory limits: model calls, wall clock, and the cap of one model call (the client's timeout)."""

    max_calls: int = 100
    wall_clock_s: float = 3600.0
    call_timeout_s: float = 600.0


CLEARED = "[older tool result cleared to save context]"


@dataclass
class AgentRun:
    """What one trajectory did; filled in as it goes, so a cancelled trajectory still has its record."""

    final_text: str = ""
    exact_answer: str | None = None
    confidence: float | None = None
    explanation: str | None = None
    stop_reason: str = ""
    model_calls: int = 0
    tool_calls: Counter = field(default_factory=Counter)
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    replayed_usd: float = 0.0  # of cost_usd, what replies kept from an earlier run cost it (paid then, not now)
    elapsed_s: float = 0.0
    retrieved: dict[str, None] = field(default_factory=dict)  # ordered sets
    surfaced: dict[str, None] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)  # one per model reply: its text (call_record)
    error: str | None = None
    model_s: float = 0.0  # time spent waiting on the model
    tool_s: float = 0.0  # time spent in tools
    retryable: bool = False  # ended by a transient failure (not the query's doing): a resume runs it again
    # model calls abandoned before their reply, and unusable replies whose usage could not be read: billed, but not in
    # usage nor cost_usd (which are then a lower bound)
    cancelled_calls: int = 0
    budget_stop: BudgetExceeded | None = None  # the refusal that ended it as `budget` (not written to the file)

    def usage(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "output_tokens": self.output_tokens,
        }

    def pay(self, reply: Any) -> None:
        """A reply's usage and cost, counted (a kept reply's, money/replies.py, also as replayed: paid before)."""
        self.input_tokens += reply.input_tokens
        self.cached_input_tokens += reply.cached_input_tokens
        self.output_tokens += reply.output_tokens
        self.cost_usd += reply.cost_usd
        self.replayed_usd += reply.cost_usd if reply.replayed else 0.0

    def pay_failed(self, e: LLMError) -> None:
        """A call that failed for good after 2xx replies it could not use: those were billed, so they count (the
        error says what was lost)."""
        if e.paid is not None:
            self.input_tokens += e.paid.input_tokens
            self.cached_input_tokens += e.paid.cached_input_tokens
            self.output_tokens += e.paid.output_tokens
            self.cost_usd += e.paid.cost_usd
        self.cancelled_calls += e.unpriced

    def end(self, reason: str, error: str | None = None) -> None:
        if not self.stop_reason:
            self.stop_reason = reason
            self.error = error


_FIELD = re.compile(r"^[\s>#*_-]*(explanation|exact answer|confidence)\s*[*_]*\s*:\s*", re.IGNORECASE | re.MULTILINE)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def parse_final(text: str) -> tuple[str | None, str | None, float | None]:
    """(explanation, exact answer, confidence 0-100) from the `Explanation: / Exact Answer: / Confidence:` reply."""
    fields: dict[str, str] = {}
    marks = list(_FIELD.finditer(text))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        value = text[m.end() : end].strip().strip("*_").strip()
        fields.setdefault(m.group(1).lower(), value)
    answer = fields.get("exact answer")
    if answer is not None:
        answer = answer.split("\n", 1)[0].strip().strip('*_`"').strip() or None
    confidence = None
    raw = fields.get("confidence")
    if raw:
        m = _NUMBER.search(raw)
        if m:
            value = float(m.group())
            if "%" not in raw[m.end() : m.end() + 2] and value <= 1.0 and "." in m.group():
                value *= 100  # "0.85" means 85%
            confidence = min(max(value, 0.0), 100.0)
    return fields.get("explanation"), answer, confidence


def is_context_overflow(exc: LLMError) -> bool:
    """The request no longer fits the model's context, whatever status the server sent it with (llm/retry.py)."""
    return exc.kind == "context-overflow" or is_overflow_message(str(exc))


def _message_dict(message: Any) -> dict[str, Any]:
    """The assistant turn as it goes back into `messages` (content and tool calls only)."""
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
        for c in message.tool_calls or []
    ]
    out: dict[str, Any] = {"role": "assistant", "content": message.content}
    if calls:
        out["tool_calls"] = calls
    return out


def _arguments(raw: str) -> Any:
    """The call's arguments as the trajectory file keeps them: parsed, or the raw text when they do not parse or
    hold what UTF-8 cannot write (a lone surrogate from a `\\ud800` escape, which the tool refused)."""
    try:
        value = json.loads(raw) if raw and raw.strip() else {}
        json.dumps(value, ensure_ascii=False).encode("utf-8")
        return value
    except (ValueError, RecursionError, UnicodeEncodeError):  # JSONDecodeError is a ValueError
        return raw.encode("utf-8", "backslashreplace").decode("utf-8")


def step_record(name: str, raw: str, result: ToolResult) -> dict[str, Any]:
    """One step of the trajectory file. Beyond the output's first STEP_OUTPUT_CHARS characters it keeps what the
    interaction metrics (eval/interaction.py) cannot recover from a cut text: the docids the call showed
    (`surfaced`), how many it linked into the workspace (`added`) and how many lines the whole output had."""
    return {
        "tool": name,
        "arguments": _arguments(raw),
        "output": result.text[:STEP_OUTPUT_CHARS],
        "surfaced": list(result.surfaced),
        "added": len(result.retrieved),
        "output_lines": result.text.count("\n") + 1,
    }


def _kept(text: str) -> str:
    """The first STEP_OUTPUT_CHARS characters of a model's text, as UTF-8 can write them (a lone surrogate from a
    `\\ud800` escape in the reply becomes its escape text instead of failing the trajectory file)."""
    return text[:STEP_OUTPUT_CHARS].encode("utf-8", "backslashreplace").decode("utf-8")


def call_record(call: int, message: Any, tool_calls: int) -> dict[str, Any]:
    """One model reply in the trajectory file's `calls`: the text the model wrote (before its tool calls, or its
    final reply) cut like a tool output, with its whole length so a reader can say it was cut, and how many tool
    calls it made (the next `tool_calls` entries of `steps`, fewer when the budget ended first). A reasoning text
    the server hands back (`reasoning_content`: vLLM, DeepSeek, or the Responses API's reasoning summaries) is kept
    the same way."""
    text = message.content if isinstance(message.content, str) else ""
    out: dict[str, Any] = {"call": call, "text": _kept(text), "text_chars": len(text), "tool_calls": tool_calls}
    reasoning = getattr(message, "reasoning_content", None)
    if isinstance(reasoning, str) and reasoning:
        out |= {"reasoning": _kept(reasoning), "reasoning_chars": len(reasoning)}
    return out


class _Context:
    """Tool results in the conversation, for DCI's cut-and-clear policy."""

    def __init__(self, messages: list[dict[str, Any]], policy: ContextPolicy | None) -> None:
        self.messages, self.policy = messages, policy or ContextPolicy()
        self.results: list[tuple[int, int]] = []  # (turn, message index)
        self.chars = 0

    def add(self, turn: int, call_id: str, text: str) -> None:
        p = self.policy
        if p.max_tool_chars and len(text) > p.max_tool_chars:
            text = text[: p.max_tool_chars] + f"\n[tool output cut: {len(text) - p.max_tool_chars:,} more characters]"
        self.results.append((turn, len(self.messages)))
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
        self.chars += len(text)
        if p.clear_after_chars and self.chars > p.clear_after_chars:
            for t, i in self.results:
                msg = self.messages[i]
                if t <= turn - p.keep_turns and msg["content"] != CLEARED:
                    self.chars -= len(msg["content"]) - len(CLEARED)
                    msg["content"] = CLEARED


async def _within(coro: Any, seconds: float) -> Any:
    """Await `coro` for at most `seconds` (TimeoutError after), however its cancellation goes.

    Unlike asyncio.wait_for, this does not wait for a cancelled call without bound: a call whose cancellation
    is swallowed by a library is cancelled once more and then left to finish in the background.
    """
    task = asyncio.ensure_future(coro)
    try:
        done, _ = await asyncio.wait({task}, timeout=max(seconds, 0.0))
    except asyncio.CancelledError:
        task.cancel()
        raise
    if done:
        return task.result()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=CANCEL_GRACE_S)
    if not done:
        task.cancel()
        task.add_done_callback(_quiet)
    elif not task.cancelled() and task.exception() is None:
        return task.result()  # it finished just in time
    raise TimeoutError


def _quiet(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log "exception was never retrieved"


def thread_clock() -> tuple[float, float] | None:
    """(ms on a CPU, ms waiting in a run queue for one) of the calling thread so far, by the kernel's scheduler
    accounting; None where /proc has no schedstat. Wall time beyond the two was spent blocked: on the GIL, a lock,
    I/O, a page fault or a child process."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            on_cpu, waiting = f.read().split()[:2]
        return int(on_cpu) / 1e6, int(waiting) / 1e6
    except (OSError, ValueError):
        return None


def _timed_call(
    tools: ToolSet, name: str, arguments: str, remaining: float, queued: float
) -> tuple[ToolResult, dict[str, float] | None]:
    """tools.call in a tool thread -> (its result, phases led by queue_ms: how long the call waited for a free
    thread; the thread's CPU and run-queue time over the call, which say whether a slow call lacked a core)."""
    queue_ms = round((time.perf_counter() - queued) * 1000, 2)
    before = thread_clock()
    # a command tool caps its own time limit at `remaining` (tools.call's timeout_s), so the sandbox kills the
    # command at the deadline and no process outlives the budget
    result = tools.call(name, arguments, timeout_s=remaining)
    after = thread_clock()
    thread = None
    if before is not None and after is not None:
        thread = {"cpu_ms": round(after[0] - before[0], 2), "runq_ms": round(after[1] - before[1], 2)}
    # "ended" is replaced by resume_ms in _call_tool, once the event loop has the result
    return result._replace(phases={"queue_ms": queue_ms, **(result.phases or {}), "ended": time.perf_counter()}), thread


async def _call_tool(
    tools: ToolSet, name: str, arguments: str, remaining: float, executor: Executor | None
) -> tuple[ToolResult, dict[str, float] | None] | None:
    """Run one (blocking) tool call in a thread, bounded by the time left -> (result, the thread's CPU and run-queue
    ms), or None when the deadline came first."""
    call = functools.partial(_timed_call, tools, name, arguments, remaining, time.perf_counter())
    loop = asyncio.get_running_loop()
    try:
        result, thread = await asyncio.wait_for(loop.run_in_executor(executor, call), remaining + TOOL_SLACK_S)
    except TimeoutError:
        return None
    phases = dict(result.phases or {})  # resume_ms: the finished call waited this long for the event loop
    phases["resume_ms"] = round((time.perf_counter() - phases.pop("ended")) * 1000, 2)
    return result._replace(phases=phases), thread


async def run_agent(
    client: Any,
    system_prompt: str,
    question: str,
    tools: ToolSet,
    budget: Budget,
    *,
    run: AgentRun | None = None,
    context: ContextPolicy | None = None,
    params: dict[str, Any] | None = None,
    executor: Executor | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> AgentRun:
    """Run one trajectory to its end; the returned (or passed-in) AgentRun says how it ended."""
    run = run if run is not None else AgentRun()
    start = clock()
    deadline = start + budget.wall_clock_s
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": f"QUESTION: {question}"},
    ]
    ctx = _Context(messages, context)
    emit = on_event or (lambda _e: None)
    try:
        await _turns(client, tools, budget, run, ctx, params or {}, executor, emit, clock, deadline)
    finally:
        run.elapsed_s = clock() - start
        if run.stop_reason == "answered":
            run.explanation, run.exact_answer, run.confidence = parse_final(run.final_text)
    return run


async def _turns(client, tools, budget, run, ctx, params, executor, emit, clock, deadline) -> None:
    messages = ctx.messages
    while True:
        if run.model_calls >= budget.max_calls:
            return run.end("max_calls")
        remaining = deadline - clock()
        if remaining <= 0:
            return run.end("wall_clock")
        run.model_calls += 1
        t0 = clock()
        try:
            timeout = min(remaining + HTTP_TIMEOUT_MARGIN_S, budget.call_timeout_s)
            done = await _within(client.complete(messages, timeout=timeout, tools=tools.schemas, **params), remaining)
        except TimeoutError:  # cut at the wall clock: whatever the model generated until then goes unreported
            run.model_s += clock() - t0
            run.cancelled_calls += 1
            return run.end("wall_clock")
        except BudgetExceeded as e:  # refused before it was sent: the run's --max-cost would not hold its worst case
            run.model_calls -= 1
            run.retryable, run.budget_stop = True, e
            return run.end("budget", str(e))
        except asyncio.CancelledError:  # the worker's deadline or the driver's watchdog, mid-call
            run.model_s += clock() - t0
            run.cancelled_calls += 1
            raise
        except LLMError as e:
            run.model_s += clock() - t0
            run.pay_failed(e)
            emit({"event": "model_error", "call": run.model_calls, "error": str(e)[:500]})
            if is_context_overflow(e):
                return run.end("context_overflow", str(e))
            if deadline - clock() <= 0.05:
                return run.end("wall_clock", str(e))
            run.retryable = is_transient(e)
            return run.end("api_error", str(e))
        run.model_s += clock() - t0
        reply = done.reply
        run.pay(reply)
        message = done.completion.choices[0].message
        calls = message.tool_calls or []
        run.calls.append(call_record(run.model_calls, message, len(calls)))
        emit(
            {
                "event": "model_call",
                "call": run.model_calls,
                "tool_calls": [c.function.name for c in calls],
                "input_tokens": reply.input_tokens,
                "output_tokens": reply.output_tokens,
                "seconds": round(clock() - t0, 4),
            }
        )
        if not calls:
            run.final_text = message.content or ""
            return run.end("answered")
        messages.append(_message_dict(message))
        for call in calls:
            remaining = deadline - clock()
            if remaining <= 0:
                return run.end("wall_clock")
            name, raw = call.function.name, call.function.arguments or ""
            t1 = clock()
            timed = await _call_tool(tools, name, raw, remaining, executor)
            run.tool_s += clock() - t1
            run.tool_calls[name] += 1
            if timed is None:
                text = "[tool call abandoned: the trajectory's time budget ran out]"
                run.steps.append(step_record(name, raw, ToolResult(text)))
                return run.end("wall_clock")
            result, thread = timed
            run.retrieved.update(dict.fromkeys(result.retrieved))
            run.surfaced.update(dict.fromkeys(result.surfaced))
            run.steps.append(step_record(name, raw, result))
            event = {"event": "tool_call", "tool": name, "error": result.error, "seconds": round(clock() - t1, 4)}
            emit(event | {"phases": result.phases, "thread": thread})  # ms; phases: tools.ToolResult.phases
            ctx.add(run.model_calls, call.id, result.text)
        if deadline - clock() <= 0:
            return run.end("wall_clock")
