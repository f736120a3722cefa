"""What the HTML report shows of one trajectory: one JSON object per trajectory, built by `trajectory_view`.

A trajectory file keeps the tool calls in order (tool, arguments, output cut to 2,000 characters) and, per model
call, the text the model wrote and how many tool calls it made (`calls`), but not when each happened or what it
cost; the run's events.jsonl does (a `model_call` event per model call, naming the tools it
called, with its tokens and seconds; a `tool_call` event per tool call with its seconds). Joining the two gives each
step its model call, time and cost. A model call's cost is the trajectory's recorded cost shared between its calls
by their tokens at the model's prices, so the steps sum to what the run was billed. The page is the only reader of
these objects, so their shape can grow (the interaction metrics of a trajectory go in `interaction`; a step is
numbered by its index in the trajectory's `steps`, as eval/interaction.py numbers it) without
touching the report's JSON.
"""

from __future__ import annotations

import functools
import logging
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from rise_batch.eval.interaction import FIELDS
from rise_batch.eval.runcheck import event_problem
from rise_batch.eval.rundir import read_run_bytes
from rise_batch.llm.pricing import PriceTable
from rise_batch.storage import AnyPath

log = logging.getLogger(__name__)
EVENTS_FILE, EVENT_PARTS = "events.jsonl", "events"  # as agent/runner.py writes them (eval sits above, not below)
EVENTS_MAX_BYTES = 2**31  # ~250 bytes an event, two a step: 10,000 queries x 300 steps stay far below
_WORKSPACE = re.compile(r"Workspace: ([\d,]+) documents \(\+([\d,]+) this call\)")


def read_events(run_dir: AnyPath, bad: list[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The model_call and tool_call events of each query's last attempt, in the order they were written (one
    events.jsonl on disk; one file per process under events/ in object storage). A line that is not JSON (a
    process killed mid-write) or whose fields have the wrong types (runcheck.EVENT) is skipped, and each file that
    had such lines is one line in `bad`: events only add time and cost to a page, they never decide a number. An
    events file is read as run files are (a regular file below the run, bounded)."""
    files = [run_dir / EVENTS_FILE] if (run_dir / EVENTS_FILE).is_file() else []
    if (run_dir / EVENT_PARTS).is_dir():
        files += sorted((run_dir / EVENT_PARTS).glob("*.jsonl"))
    by_query: dict[str, list[dict[str, Any]]] = defaultdict(list)
    last: dict[str, Any] = {}
    problems = [] if bad is None else bad
    for f in files:
        try:
            data = read_run_bytes(f, run_dir, EVENTS_MAX_BYTES)
        except (OSError, ValueError) as e:
            problems.append(str(e) if str(e).startswith(str(f)) else f"{f}: {e}")
            continue
        skipped, first = 0, ""
        for n, line in enumerate(data.splitlines(), 1):
            if not line.strip():
                continue
            try:
                e, why = orjson.loads(line), None
            except orjson.JSONDecodeError:
                e, why = None, "not JSON"
            if why := why or event_problem(e):
                skipped, first = skipped + 1, first or f"line {n}: {why}"
                continue
            if e.get("event") not in ("start", "model_call", "tool_call"):
                continue
            qid = str(e.get("query_id"))
            if e["event"] == "start":  # a new attempt replaces what an earlier one logged
                by_query[qid], last[qid] = [], e.get("attempt")
            elif e.get("attempt") == last.get(qid, e.get("attempt")):
                by_query[qid].append(e)
        if skipped:
            problems.append(f"{f}: {skipped} line(s) skipped (first: {first})")
    for events in by_query.values():
        events.sort(key=lambda e: e.get("t") or 0)
    return dict(by_query)


def interaction_of(row: dict[str, Any]) -> dict[str, Any] | None:
    """A per-query row's interaction metrics (metrics.per_query_rows puts them in the row); None when the row has
    none."""
    return {k: row[k] for k in FIELDS if k in row} or None


def verdict(row: dict[str, Any]) -> str:
    """One word for a per-query row's judgment, the filter values of the page."""
    if row.get("unjudged"):
        return "unjudged"
    if row.get("correct") is None:
        return "not judged"
    if row.get("correct"):
        return "correct"
    return "no answer" if row.get("method") == "empty" else "wrong"


@functools.cache
def _prices(model: str) -> Any:
    """The packaged price of `model` (None when unknown), read once per report, not once per trajectory."""
    return PriceTable.load().find(model)


def _weights(model: str, calls: Sequence[dict[str, Any]]) -> list[float]:
    """What each model call would cost at the model's prices (tokens alone when the model has none)."""
    price = _prices(model)
    p_in, p_out = (price.input, price.output) if price else (1.0, 1.0)
    return [float(c.get("input_tokens") or 0) * p_in + float(c.get("output_tokens") or 0) * p_out for c in calls]


def _turns(trajectory: dict[str, Any], events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The model calls with their tool steps attached and the text each call wrote before them (the trajectory's
    `calls`). Without events the trajectory's `calls` group the steps; without either each step is its own call."""
    steps = [s for s in trajectory.get("steps") or () if isinstance(s, dict)]
    events = list(events)
    said = [c for c in trajectory.get("calls") or () if isinstance(c, dict)]
    calls = [e for e in events if e.get("event") == "model_call"]
    tool_s = [e.get("seconds") for e in events if e.get("event") == "tool_call"]
    if calls:
        weights = _weights(str(trajectory.get("model") or ""), calls)
        total, cost = sum(weights), float(trajectory.get("cost_usd") or 0.0)
        heads = [
            {
                "call": c.get("call"),
                "seconds": c.get("seconds"),
                "input_tokens": c.get("input_tokens"),
                "output_tokens": c.get("output_tokens"),
                "cost_usd": cost * w / total if total else None,
            }
            for c, w in zip(calls, weights, strict=True)
        ]
        sizes = [len(tc) if isinstance(tc := c.get("tool_calls"), list) else 0 for c in calls]  # an end event: a count
    elif said:
        heads = [{"call": c.get("call")} for c in said]
        sizes = [n if isinstance(n := c.get("tool_calls"), int) and n > 0 else 0 for c in said]
    else:
        return [{"call": None, "steps": [dict(s)]} for s in steps]
    texts = {c.get("call"): c for c in said}
    final = heads[-1]["call"] if trajectory.get("stop_reason") == "answered" else None
    turns, at = [], 0
    for head, n in zip(heads, sizes, strict=True):
        text = _said(texts.get(head["call"]), final_reply=n == 0 and head["call"] == final)
        span = [s | {"seconds": tool_s[i] if i < len(tool_s) else None} for i, s in _span(steps, at, n)]
        turns.append(head | text | {"steps": span})
        at += n
    if at < len(steps):  # steps the events do not account for (lost lines): shown, never dropped
        turns.append({"call": None, "steps": [dict(s) for s in steps[at:]]})
    return turns


def _said(call: dict[str, Any] | None, final_reply: bool) -> dict[str, Any]:
    """A model call's text and reasoning with their whole lengths (more than the text when the file cut it). The
    answering call's text is left out: it is the final reply, which the page shows whole."""
    out: dict[str, Any] = {}
    for key in ("reasoning",) if final_reply else ("reasoning", "text"):
        value = (call or {}).get(key)
        if isinstance(value, str) and value:
            chars = call.get(f"{key}_chars")  # type: ignore[union-attr]
            out |= {key: value, f"{key}_chars": chars if isinstance(chars, int) else len(value)}
    return out


def _span(steps: list[dict[str, Any]], at: int, n: int) -> list[tuple[int, dict[str, Any]]]:
    return list(enumerate(steps[at : at + n], at))


def _workspace(steps: Sequence[dict[str, Any]], interaction: dict[str, Any] | None) -> None:
    """Each search step's workspace after it and what it added: from the interaction metrics' `workspace_growth`
    ([step, workspace docs] after each search call) when given, else read off the search output's closing line
    when it was kept."""
    growth = {int(g[0]): int(g[1]) for g in (interaction or {}).get("workspace_growth") or () if len(g) == 2}
    before = 0
    for s in steps:
        if s.get("tool") != "search":
            continue
        if s["step"] in growth:
            s["workspace"] = {"docs": growth[s["step"]], "added": growth[s["step"]] - before}
            before = growth[s["step"]]
        elif m := _WORKSPACE.search(str(s.get("output") or "")):
            s["workspace"] = {"docs": int(m[1].replace(",", "")), "added": int(m[2].replace(",", ""))}


def trajectory_view(
    trajectory: dict[str, Any], events: Iterable[dict[str, Any]] = (), interaction: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The one object the page gets for a trajectory: its steps grouped by model call, with time, cost, workspace
    growth and (when given) the interaction metrics that the page highlights."""
    t = trajectory
    turns = _turns(t, events)
    flat = [s for turn in turns for s in turn["steps"]]
    for n, s in enumerate(flat):
        s["step"] = n  # the index in the trajectory's `steps`, as the interaction metrics number steps
    _workspace(flat, interaction)
    keep = ("query_id", "query", "system", "model", "stop_reason", "final_text", "exact_answer", "confidence")
    keep += ("answer", "cost_usd", "elapsed_s", "model_calls", "tool_calls", "workspace_docs", "gold_doc_ids", "error")
    return {k: t.get(k) for k in keep} | {"turns": turns, "interaction": interaction}
