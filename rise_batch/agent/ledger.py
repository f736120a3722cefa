"""What a run's trajectory files record as spent: the figure `--max-cost` counts against, across resumes.

A trajectory cut by a transient failure or by the cost limit is marked `retryable` and runs again on the next
invocation, which replaces its file. What the cut runs paid must not vanish with it: the new file carries it as
`earlier_runs` (how many runs were cut, their model calls, tokens and dollars, added up), apart from the
trajectory's own `cost_usd`, so a report can say what the query cost to answer and what the run paid in all.
"""

from __future__ import annotations

from typing import Any

from rise_batch.io import read_json
from rise_batch.storage import AnyPath

USAGE = ("input_tokens", "cached_input_tokens", "output_tokens")
EARLIER = "earlier_runs"


def earlier_spend(path: AnyPath) -> dict[str, Any] | None:
    """The spend of the cut runs of a query whose retryable file `path` is about to be replaced (its own and what
    it carried), or None when there is no such file or it spent nothing."""
    try:
        t = read_json(path)
    except (OSError, ValueError):
        return None
    if not isinstance(t, dict) or not t.get("retryable"):
        return None
    prev = t.get(EARLIER) or {}
    usage = t.get("usage") or {}
    out = {
        "runs": int(prev.get("runs", 0)) + 1,
        "model_calls": int(prev.get("model_calls", 0)) + int(t.get("model_calls") or 0),
        "cost_usd": round(float(prev.get("cost_usd", 0.0)) + float(t.get("cost_usd") or 0.0), 8),
        **{k: int(prev.get(k, 0)) + int(usage.get(k) or 0) for k in USAGE},
    }
    return out if out["model_calls"] or out["cost_usd"] else prev or None


def spent_usd(record: dict[str, Any]) -> float:
    """What one trajectory file records as paid: its own cost and its cut runs'."""
    return float(record.get("cost_usd") or 0.0) + float((record.get(EARLIER) or {}).get("cost_usd") or 0.0)
