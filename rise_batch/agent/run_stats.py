"""A trajectory run's figures, typed: the totals over its trajectory files and what this invocation did
(`RunStats`, whose `to_json()` is what `rise-batch run --json` prints and a sweep's state keeps), and what each
worker reports when it closes (`WorkerReport`: its client's counters and what its node's input copies cost it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from rise_batch.agent.ledger import EARLIER
from rise_batch.agent.runner import trajectory_path
from rise_batch.io import read_json
from rise_batch.queries import Query

# the client counters a run's stats show (per-worker sums); the others are for the structure job's
TRANSPORT_KEYS = (
    *("calls", "attempts", "retries", "rate_limited", "server_errors", "timeouts", "failures"),
    *("usage_estimated", "replayed"),  # replies billed at the engine's own count; calls answered from kept replies
)


class WorkerReport(NamedTuple):
    """What a trajectory worker reports when it closes."""

    transport: dict[str, Any]  # its client's counters (llm.client.LLMStats)
    cache: dict[str, Any]  # its node's input copies: node, inputs, first_trajectory_s (runner.WorkerContext.report)


@dataclass
class RunStats:
    """Totals over a run's trajectory files (this config hash only), then this invocation's own figures."""

    queries: int
    missing: int = 0  # no trajectory file under this config hash
    retryable: int = 0  # ended by a transient failure: run again by the next invocation
    stop_reasons: Counter[str] = field(default_factory=Counter)
    model_calls: int = 0
    tool_calls: Counter[str] = field(default_factory=Counter)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cancelled_calls: int = 0  # model calls cut before their reply: billed, but in no usage nor cost_usd
    earlier_cost_usd: float = 0.0  # what runs of these queries cut by a failure or the cost limit paid (ledger.py)
    # this invocation's
    nodes: dict[str, int] | None = None  # on Ray: queries run per node
    cache: dict[str, dict[str, Any]] | None = None  # per node, what the copies of the inputs cost (cache_by_node)
    sources_checked_s: float | None = None  # with `cache`: the driver's check of those inputs before any node's copy
    transport: dict[str, int] | None = None  # only when this invocation sent requests
    system: str = ""
    model: str = ""
    config_hash: str = ""
    ran: int = 0
    skipped: int = 0
    wall_seconds: float = 0.0

    @classmethod
    def of_files(cls, run_dir: str | Path, queries: list[Query], config_hash: str) -> RunStats:
        s = cls(len(queries))
        for q in queries:
            try:
                t = read_json(trajectory_path(run_dir, q.query_id))
            except (OSError, ValueError):
                s.missing += 1
                continue
            if t.get("config_hash") != config_hash:
                s.missing += 1
                continue
            s.add(t)
        return s

    def add(self, t: dict[str, Any]) -> None:
        """One trajectory file's figures."""
        self.stop_reasons[t["stop_reason"]] += 1
        self.retryable += bool(t.get("retryable"))
        self.tool_calls.update(t.get("tool_calls") or {})
        self.model_calls += t.get("model_calls", 0)
        self.input_tokens += t["usage"]["input_tokens"]
        self.output_tokens += t["usage"]["output_tokens"]
        self.cost_usd += t.get("cost_usd") or 0.0
        self.cancelled_calls += t.get("cancelled_calls") or 0
        self.earlier_cost_usd += (t.get(EARLIER) or {}).get("cost_usd") or 0.0

    @property
    def trajectories(self) -> int:
        return sum(self.stop_reasons.values())

    @property
    def cost_lower_bound(self) -> bool:
        """Calls were cut: their billed output is in no reply, so cost_usd is at least what was spent."""
        return self.cancelled_calls > 0

    def to_json(self) -> dict[str, Any]:
        n = max(self.trajectories, 1)
        out: dict[str, Any] = {
            "queries": self.queries,
            "trajectories": self.trajectories,
            "missing": self.missing,
            "retryable": self.retryable,
            "stop_reasons": dict(sorted(self.stop_reasons.items())),
            "model_calls_mean": round(self.model_calls / n, 2),
            "tool_calls": dict(sorted(self.tool_calls.items())),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "cost_usd_per_query": round(self.cost_usd / n, 6),
            "cancelled_calls": self.cancelled_calls,
            "cost_lower_bound": self.cost_lower_bound,
            # paid by cut runs before these trajectories ran again: the run's total spend is the two added
            "earlier_cost_usd": round(self.earlier_cost_usd, 6),
            "spent_usd": round(self.cost_usd + self.earlier_cost_usd, 6),
        }
        for k in ("nodes", "cache", "sources_checked_s", "transport"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        return out | {
            "system": self.system,
            "model": self.model,
            "config_hash": self.config_hash,
            "ran": self.ran,
            "skipped": self.skipped,
            "wall_seconds": round(self.wall_seconds, 3),
        }


def cache_by_node(reports: list[dict[str, Any]], labels: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The workers' cache reports summed per node: bytes fetched, seconds the slowest worker spent getting the
    inputs (the others waited for its copy), whether every input was found made already, the earliest first
    trajectory, and the same per input (docs, index, original)."""
    out: dict[str, dict[str, Any]] = {}
    for r in reports:
        node = labels.get(r.get("node") or "", r.get("node") or "driver")
        n = out.setdefault(node, {"bytes": 0, "seconds": 0.0, "reused": True, "first_trajectory_s": None,
                                  "workers": 0, "inputs": {}})  # fmt: skip
        n["workers"] += 1
        n["wall"] = max(n.get("wall", 0.0), r.get("inputs_s") or 0.0)
        first = r.get("first_trajectory_s")
        if first is not None and (n["first_trajectory_s"] is None or first < n["first_trajectory_s"]):
            n["first_trajectory_s"] = first
        for kind, got in (r.get("inputs") or {}).items():
            k = n["inputs"].setdefault(kind, {"bytes": 0, "seconds": 0.0, "reused": True})
            k["bytes"] += got["bytes"]
            k["seconds"] = max(k["seconds"], got["seconds"])
            k["reused"] = k["reused"] and got["reused"] is not False
    for n in out.values():
        n["bytes"] = sum(k["bytes"] for k in n["inputs"].values())
        # the slowest worker's wall over all of them (they overlap), else (reports before it) their sum
        n["seconds"] = round(n.pop("wall", 0.0) or sum(k["seconds"] for k in n["inputs"].values()), 3)
        n["reused"] = all(k["reused"] for k in n["inputs"].values())
    return dict(sorted(out.items()))


def cache_line(node: str, c: dict[str, Any]) -> str:
    """One node's line: `rise-batch run: cache on NODE: fetched 1.2 MB in 3.4 s (docs 1.0 MB ...), first ..."""

    def one(kind: str, k: dict[str, Any]) -> str:
        got = "reused" if k["reused"] else f"{k['bytes'] / 1e6:.1f} MB"
        return f"{kind} {got} {k['seconds']:.1f} s"

    parts = ", ".join(one(kind, k) for kind, k in c["inputs"].items())
    first = c["first_trajectory_s"]
    return (
        f"rise-batch run: cache on {node}: fetched {c['bytes'] / 1e6:.1f} MB in {c['seconds']:.1f} s ({parts}); "
        f"first trajectory {f'{first:.1f} s' if first is not None else '-'} after its worker started"
    )
