"""Field types of run files, checked before a report, a judge or an export trusts them (pure: no I/O).

A run directory may have been copied, edited or forged, and a run file that parses as JSON can still hold a string
where a count belongs, a list where a key belongs or an object where text belongs; read on trust, such a value
ends the report in a traceback (or, worse, in a silently wrong figure). Each check here returns one line saying
which field is wrong and what it must be (None when the object is fine), and the reader skips that file or line
with a warning naming it. `None` (a field left out) is always accepted: older files lack newer fields.

The types are those `rise-batch run` (agent/runner.py, agent/loop.py), `rise-batch judge` (eval/judge_runner.py) and
the sweep job (cell.json) write; a field no reader looks at is not checked.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

Check = Callable[[Any], bool]


def _count(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _key(v: Any) -> bool:  # a query id: text or a number, never a bool
    return isinstance(v, str) or _int(v)


def _strs(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _counts(v: Any) -> bool:
    return isinstance(v, dict) and all(x is None or _count(x) for x in v.values())


def _str_map(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(x, str) for x in v.values())


def _objects(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, dict) for x in v)


def _dict(v: Any) -> bool:
    return isinstance(v, dict)


def _list(v: Any) -> bool:
    return isinstance(v, list)


# what each check asks for, in the one line naming a field (None passes every check)
_WANT: dict[Check, str] = {
    _count: "a number",
    _int: "an integer",
    _str: "a string",
    _key: "a string",
    _strs: "a list of strings",
    _counts: "an object of counts",
    _str_map: "an object of strings",
    _objects: "a list of objects",
    _dict: "an object",
    _list: "a list",
}
TRAJECTORY: dict[str, Check] = {
    "query_id": _key,
    **dict.fromkeys(("system", "model", "stop_reason", "final_text", "exact_answer", "config_hash"), _str),
    **dict.fromkeys(("model_calls", "cost_usd", "elapsed_s", "workspace_docs", "confidence"), _count),
    **dict.fromkeys(("usage", "tool_calls"), _counts),
    **dict.fromkeys(("retrieved_docids", "surfaced_docids", "gold_doc_ids"), _strs),
    "gold_paths": _str_map,
    "steps": _objects,
    "calls": _objects,
}
STEP: dict[str, Check] = {
    "tool": _str,
    "arguments": _dict,
    "output": _str,
    "surfaced": _strs,
    "added": _int,
    "output_lines": _int,
}
CALL: dict[str, Check] = {"call": _int, "tool_calls": _int}
JUDGMENT: dict[str, Check] = {"cost_usd": _count, "method": _str}
EVENT: dict[str, Check] = {
    "event": _str,
    "query_id": _key,
    "attempt": _int,
    "t": _count,
    "call": _int,
    "tool_calls": _list,
    "input_tokens": _count,
    "output_tokens": _count,
    "seconds": _count,
    "tool": _str,
}
RUN_META: dict[str, Check] = {
    **dict.fromkeys(("system", "model", "corpus", "retriever", "gold", "config_hash"), _str),
    **dict.fromkeys(("k", "corpus_docs", "repeat"), _int),
}


def _got(value: Any) -> str:
    got = type(value).__name__
    if isinstance(value, list | dict):
        items = value if isinstance(value, list) else list(value.values())
        got += f" holding {', '.join(sorted({type(v).__name__ for v in items}))}" if items else " (empty)"
    return got


def field_problem(obj: dict[str, Any], fields: dict[str, Check], where: str = "") -> str | None:
    """The first field of `obj` whose value fails its check, as "field 'x' must be Y, got Z"; None when all pass."""
    for name, check in fields.items():
        value = obj.get(name)
        if value is not None and not check(value):
            return f"{where}field {name!r} must be {_WANT[check]}, got {_got(value)}"
    return None


def trajectory_problem(t: dict[str, Any]) -> str | None:
    """What is wrong with a trajectory's fields (its steps' and calls' too), or None."""
    if t.get("query_id") is None:
        return "field 'query_id' must be a string, got nothing"
    if problem := field_problem(t, TRAJECTORY):
        return problem
    for i, step in enumerate(t.get("steps") or ()):
        if problem := field_problem(step, STEP, f"steps[{i}]: "):
            return problem
    for i, call in enumerate(t.get("calls") or ()):
        if problem := field_problem(call, CALL, f"calls[{i}]: "):
            return problem
    return None


def judgment_problem(j: dict[str, Any]) -> str | None:
    """What is wrong with a judgment's fields, or None (a `correct` that is no boolean is no verdict: judge.py)."""
    return field_problem(j, JUDGMENT)


def event_problem(e: Any) -> str | None:
    """What is wrong with an events.jsonl line (parsed), or None."""
    if not isinstance(e, dict):
        return f"holds a JSON {type(e).__name__}, not an object"
    return field_problem(e, EVENT)


def clean_meta(meta: dict[str, Any], where: str, bad: list[str]) -> dict[str, Any]:
    """`meta` (run.json, cell.json) without the fields of the wrong type, each named in `bad`."""
    out = dict(meta)
    for name, check in RUN_META.items():
        if out.get(name) is not None and not check(out[name]):
            bad.append(f"{where}: field {name!r} must be {_WANT[check]}, got {_got(out[name])}; left out")
            del out[name]
    return out
