"""The structure job's figures, typed: one shard's (`ShardStats`, summed with `+`), what a worker reports for a shard
(`ShardReport`), and the job's (`StructureStats`, whose `to_json()` is stats.json); while shards run, a worker's
documents so far (`ShardCount`, the shard pipeline's `on_doc`) and what a Ray worker answers the driver's progress
poll (`WorkerProgress`).

A shard's figures come from its checkpoint rows (`ShardStats.of_rows`) or, for a shard an earlier run finished, from
its done marker (`ShardStats.from_marker`). Fields a run does not always produce are None (or 0) when absent and are
left out of the JSON then, so a file keeps the keys it always had: the online loop's `resumed_docs` and
`shard_seconds` (batch mode has neither), `rebought_*` (only after a kill), `docs_left` (only when documents were
left for a resume), `resumed_done` (only on a resume). A shard that left documents undone reports them beside the
rows its checkpoint holds, so stats.json always agrees with the checkpoint (`counted` is False only for a sum of no
counted shard).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple, Protocol

from rise_batch.types import OUTCOME_TOC, DocResult

ROW_SUMS = (  # DocResult fields summed as they are
    "anchors_proposed",
    "anchors_exact",
    "anchors_normalized",
    "anchors_prefix",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasks",
)


# the fields a done marker records under their own names (it records docs_resumed as "resumed_docs")
MARKER_FIELDS = (
    "docs_total", "docs_schema_constrained", *ROW_SUMS, "llm_calls", "cost_usd", "outcomes", "anchors_dropped",
    "shard_seconds",
)  # fmt: skip


def _add(a: Any, b: Any) -> Any:
    """One field of a sum: numbers add (None is absent), counters add per key, an example keeps the first."""
    if a is None or b is None:
        return b if a is None else a
    if isinstance(a, bool):
        return a or b
    if isinstance(a, dict):
        return {k: a.get(k, 0) + b.get(k, 0) for k in a | b}
    if isinstance(a, str):
        return a or b
    return a + b


@dataclass
class ShardStats:
    """One shard's figures, or the sum of several (`a + b`); every field adds up."""

    counted: bool = False  # the row figures below were summed (False: only documents left undone are reported)
    docs_total: int = 0
    docs_schema_constrained: int = 0  # rows made from a reply held to the JSON schema (structured outputs)
    anchors_proposed: int = 0
    anchors_exact: int = 0
    anchors_normalized: int = 0
    anchors_prefix: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasks: int = 0
    llm_calls: int = 0
    cost_usd: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)
    anchors_dropped: dict[str, int] = field(default_factory=dict)
    # the online loop's, recorded in the done marker (None: batch mode, which has no loop)
    docs_resumed: int | None = None  # rows an earlier run had checkpointed (paid then, not in this run's rate)
    shard_seconds: float | None = None
    # this run's, never in a marker
    shards_resumed: int = 0  # shards an earlier run finished: their figures are their markers'
    rebought_replies: int | None = None  # replies an earlier run of the shard received but never checkpointed
    rebought_cost_usd: float | None = None
    docs_left: int = 0  # documents a transient failure left for a resume (no row, no marker)
    left_kinds: dict[str, int] = field(default_factory=dict)
    left_example: str = ""

    def __add__(self, other: ShardStats) -> ShardStats:
        return ShardStats(**{f.name: _add(getattr(self, f.name), getattr(other, f.name)) for f in fields(self)})

    @property
    def docs_with_toc(self) -> int:
        return self.outcomes.get(OUTCOME_TOC, 0)

    @property
    def anchors_located(self) -> int:
        return self.anchors_exact + self.anchors_normalized + self.anchors_prefix

    @classmethod
    def of_rows(cls, rows: Iterable[DocResult]) -> ShardStats:
        """A shard's figures from its checkpoint rows."""
        s = cls(counted=True)
        outcomes: Counter[str] = Counter()
        dropped: Counter[str] = Counter()
        for r in rows:
            s.docs_total += 1
            s.docs_schema_constrained += bool(r.schema_constrained)
            outcomes[r.outcome] += 1
            for k in ROW_SUMS:
                setattr(s, k, getattr(s, k) + getattr(r, k))
            s.cost_usd += r.cost_usd
            s.llm_calls += r.attempts if r.tier == "llm" else 0
            dropped.update(json.loads(r.anchors_dropped_json or "{}"))
        s.outcomes, s.anchors_dropped = dict(outcomes), dict(dropped)
        return s

    @classmethod
    def from_marker(cls, marker: dict[str, Any], resumed: bool) -> ShardStats:
        """The figures a done marker records (what `marker_json` wrote); `resumed`: an earlier run finished the
        shard (its figures are not this run's work)."""
        row_figures = {k: v for k, v in marker.items() if k in MARKER_FIELDS}
        return cls(counted=True, docs_resumed=marker.get("resumed_docs"), shards_resumed=int(resumed), **row_figures)

    def marker_json(self) -> dict[str, Any]:
        """The done marker's figures: the row figures, plus the online loop's."""
        out: dict[str, Any] = {k: getattr(self, k) for k in ("docs_total", "docs_schema_constrained", *ROW_SUMS)}
        out |= {
            "llm_calls": self.llm_calls,
            "cost_usd": self.cost_usd,
            "outcomes": self.outcomes,
            "anchors_dropped": self.anchors_dropped,
            "docs_with_toc": self.docs_with_toc,
            "anchors_located": self.anchors_located,
        }
        if self.docs_resumed is not None:
            out["resumed_docs"] = self.docs_resumed
        if self.shard_seconds is not None:
            out["shard_seconds"] = self.shard_seconds
        return out

    def to_json(self) -> dict[str, Any]:
        """stats.json's shard figures: those of the marker (when rows were counted), then this run's."""
        out = self.marker_json() if self.counted else {}
        if self.shards_resumed:
            out["resumed_done"] = self.shards_resumed
        if self.rebought_replies is not None:
            out["rebought_replies"] = self.rebought_replies
        if self.rebought_cost_usd is not None:
            out["rebought_cost_usd"] = self.rebought_cost_usd
        if self.docs_left:
            out |= {"docs_left": self.docs_left, "left_kinds": self.left_kinds}
        return out


class ShardReport(NamedTuple):
    """What a worker returns for a shard: its figures, and the retries and 429s its client counted since its
    previous report (for the driver's progress line while the job runs; the job's totals come from `close`)."""

    stats: ShardStats
    retries: int = 0
    rate_limited: int = 0


class OnDoc(Protocol):
    """The shard pipeline's per-document callback: `(1, usd)` for a document this run structured, `(1, 0.0, True)`
    for one an earlier run checkpointed (done, and paid for, then)."""

    def __call__(self, n: int, usd: float, earlier: bool = False) -> None: ...


@dataclass
class ShardCount:
    """One running shard's documents so far: this run's, an earlier run's (checkpointed, skipped) and dollars. On
    Ray it is the shard pipeline's `on_doc`, read by ShardWorker.progress()."""

    done: int = 0
    earlier: int = 0
    cost: float = 0.0

    def __call__(self, n: int, usd: float, earlier: bool = False) -> None:
        if earlier:
            self.earlier += n
        else:
            self.done += n
            self.cost += usd


class WorkerProgress(NamedTuple):
    """A Ray worker's answer to the driver's progress poll: each running shard's counts so far (copies), and the
    retries and 429s its client counted since its previous report (a shard's ShardReport carries the rest)."""

    shards: dict[int, ShardCount]
    retries: int = 0
    rate_limited: int = 0


def docs_this_run(shards: Iterable[ShardStats]) -> int:
    """Documents this run structured. A shard an earlier run finished, and the rows an earlier run checkpointed in
    an interrupted shard, are counted in docs_total but are not this run's work: a resumed run's docs/s counts
    only what it measured. (Batch mode reports no per-shard skips: a shard it finishes counts whole.)"""
    return sum(s.docs_total - (s.docs_resumed or 0) for s in shards if not s.shards_resumed)


REBOUGHT = ("rebought_replies", "rebought_cost_usd")


@dataclass
class StructureStats:
    """The job's figures: the sum of its shards' and the run's own; `to_json()` is what stats.json holds."""

    shards: ShardStats
    n_shards: int
    run_hash: str
    backend: str
    bad_rows: int  # rows refused up front (recorded in bad_rows.parquet, counted as "skipped" outcomes)
    docs_this_run: int
    wall_seconds: float
    nodes: dict[str, int] = field(default_factory=dict)  # on Ray: shards run per node
    transport: dict[str, Any] | None = None  # the LLM backend's: this run's HTTP (or Batch API) traffic
    structured_output: str = ""  # "on", "off" or "refused" (LLM backend)
    structured_output_switched_off: int = 0  # workers that switched the schema off when the server refused it
    checked: dict[str, Any] = field(default_factory=dict)  # what the resume's verification found (verify.py)
    index: str | None = None  # --index: where the index was built

    def to_json(self) -> dict[str, Any]:
        out = self.shards.to_json()
        if self.nodes:
            out["nodes"] = self.nodes
        if self.transport is not None:
            out["transport"] = self.transport
            out["structured_output"] = self.structured_output
            out["structured_output_switched_off"] = self.structured_output_switched_off
        wall = self.wall_seconds
        out.update(
            docs_total=self.shards.docs_total,
            docs_this_run=self.docs_this_run,
            bad_rows=self.bad_rows,
            shards=self.n_shards,
            run_hash=self.run_hash,
            backend=self.backend,
            wall_seconds=round(wall, 3),
            docs_per_second=round(self.docs_this_run / wall, 2) if wall > 0 else 0.0,
            cost_usd=round(self.shards.cost_usd, 6),
        )
        out["outcomes"] = self.shards.outcomes | ({"skipped": self.bad_rows} if self.bad_rows else {})
        for k, v in self.checked.items():  # found by the verification, plus what shards rerun in this job re-bought
            out[k] = out.get(k, 0) + v if k in REBOUGHT else v
        if "rebought_cost_usd" in out:
            out["rebought_cost_usd"] = round(out["rebought_cost_usd"], 6)
        if self.index is not None:
            out["index"] = self.index
        return out
