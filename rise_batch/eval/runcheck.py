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

from collections.abc import Callable
from typing import Any, NamedTuple


class Check(NamedTuple):
    """A field's type: the exact types its value may have (bool is no number), then, for a list or an object, a
    check of what it holds; `want` names it in the line a wrong value gets."""

    types: frozenset[type]
    want: str
    holds: Callable[[Any], bool] | None = None


# the contents' types gathered by map and set, in C: a trajectory's retrieved_docids alone are 1,000 strings
_STR_ONLY, _COUNT_TYPES, _DICT_ONLY = frozenset({str}), frozenset({type(None), int, float}), frozenset({dict})


def _all_str(v: list[Any] | dict[str, Any]) -> bool:
    return set(map(type, v.values() if type(v) is dict else v)) <= _STR_ONLY


def _all_counts(v: dict[str, Any]) -> bool:
    return set(map(type, v.values())) <= _COUNT_TYPES


def _all_objects(v: list[Any]) -> bool:
    return set(map(type, v)) <= _DICT_ONLY


COUNT = Check(frozenset({int, float}), "a number")
INT = Check(frozenset({int}), "an integer")
STR = Check(frozenset({str}), "a string")
KEY = Check(frozenset({str, int}), "a string")  # a query id: text or a number
STRS = Check(frozenset({list}), "a list of strings", _all_str)
COUNTS = Check(frozenset({dict}), "an object of counts", _all_counts)
STR_MAP = Check(frozenset({dict}), "an object of strings", _all_str)
OBJECTS = Check(frozenset({list}), "a list of objects", _all_objects)
OBJECT = Check(frozenset({dict}), "an object")
LIST = Check(frozenset({list}), "a list")

TRAJECTORY: dict[str, Check] = {
    "query_id": KEY,
    **dict.fromkeys(("system", "model", "stop_reason", "final_text", "exact_answer", "config_hash"), STR),
    **dict.fromkeys(("model_calls", "cost_usd", "elapsed_s", "workspace_docs", "confidence"), COUNT),
    **dict.fromkeys(("usage", "tool_calls"), COUNTS),
    **dict.fromkeys(("retrieved_docids", "surfaced_docids", "gold_doc_ids"), STRS),
    "gold_paths": STR_MAP,
    "steps": OBJECTS,
    "calls": OBJECTS,
}
STEP: dict[str, Check] = {
    "tool": STR,
    "arguments": OBJECT,
    "output": STR,
    "surfaced": STRS,
    "added": INT,
    "output_lines": INT,
}
CALL: dict[str, Check] = {"call": INT, "tool_calls": INT}
JUDGMENT: dict[str, Check] = {"cost_usd": COUNT, "method": STR}
EVENT: dict[str, Check] = {
    "event": STR,
    "query_id": KEY,
    "attempt": INT,
    "t": COUNT,
    "call": INT,
    "tool_calls": LIST,
    "input_tokens": COUNT,
    "output_tokens": COUNT,
    "seconds": COUNT,
    "tool": STR,
}
RUN_META: dict[str, Check] = {
    **dict.fromkeys(("system", "model", "corpus", "retriever", "gold", "config_hash"), STR),
    **dict.fromkeys(("k", "corpus_docs", "repeat"), INT),
}


def _fails(check: Check, value: Any) -> bool:
    return type(value) not in check.types or (check.holds is not None and not check.holds(value))


def _got(value: Any) -> str:
    got = type(value).__name__
    if isinstance(value, list | dict):
        items = value if isinstance(value, list) else list(value.values())
        got += f" holding {', '.join(sorted({type(v).__name__ for v in items}))}" if items else " (empty)"
    return got


def _deep(fields: dict[str, Check]) -> tuple[tuple[str, Check], ...]:
    """The fields whose contents are checked (lists, objects), listed once per table."""
    if (deep := _DEEP.get(id(fields))) is None:
        deep = _DEEP[id(fields)] = tuple((name, check) for name, check in fields.items() if check.holds is not None)
    return deep


_DEEP: dict[int, tuple[tuple[str, Check], ...]] = {}
_PASSED: set[tuple[Any, ...]] = set()  # (field table, keys..., value types...) of the objects that passed
_PASSED_MAX = 16384


def field_problem(obj: dict[str, Any], fields: dict[str, Check], where: str = "") -> str | None:
    """The first field of `obj` whose value fails its check, as "field 'x' must be Y, got Z"; None when all pass.

    A report checks a million events and steps, which come in a few shapes: the keys and value types of an object
    that passed are remembered (in one flat tuple with its table, the cheapest key to build), and an object of a
    known shape only has its lists' and objects' contents checked (an event: nothing more).
    Numbers need no check for NaN: rundir reads NaN and infinities as null."""
    shape = (id(fields), *obj, *map(type, obj.values()))  # n keys then n types: the split is never ambiguous
    known = shape in _PASSED
    checks = _deep(fields) if known else fields.items()
    for name, check in checks:
        value = obj.get(name)
        if value is not None and (type(value) not in check.types or (check.holds and not check.holds(value))):
            return f"{where}field {name!r} must be {check.want}, got {_got(value)}"
    if not known and len(_PASSED) < _PASSED_MAX:
        _PASSED.add(shape)
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
    if e.get("event") == "end" and type(e.get("tool_calls")) is int:  # an end event counts its tool calls
        return field_problem({k: v for k, v in e.items() if k != "tool_calls"}, EVENT)
    return field_problem(e, EVENT)


def clean_meta(meta: dict[str, Any], where: str, bad: list[str]) -> dict[str, Any]:
    """`meta` (run.json, cell.json) without the fields of the wrong type, each named in `bad`."""
    out = dict(meta)
    for name, check in RUN_META.items():
        if out.get(name) is not None and _fails(check, out[name]):
            bad.append(f"{where}: field {name!r} must be {check.want}, got {_got(out[name])}; left out")
            del out[name]
    return out
