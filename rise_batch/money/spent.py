"""`spent_usd(directory)`: all an output directory has paid, across resumes, in one function every reader shares.

The one figure summaries, `--json`, `stats.json`, `sweep.json`, reports, `rise-batch status` and every `--max-cost`
cap (run, judge, sweep, structure) use as `spent_usd`. Its source is the spend journal (money/journal.py): settled
calls at what they were billed, calls a kill left unsettled at their worst case, every writer and resume merged. A
sweep's OUT adds its cells' journals (`cells/*/`), whose judging is written in each cell's own journal.

The trajectory and judgment files are reports derived from the same calls, never the source: a file whose `cost_usd`
is negative, not a finite number, or lower than the journal's figure for it is named in ONE warning line
(`record_problems`) and never lowers what was spent. Only a file the journal has no call for (one written before
the journal existed, a judgment of the Batch API) is counted at its own (sane) figure. A file is compared with the
journal's settled calls for it (`trajectory:<stem>`, `judgment:<stem>`): a call a kill left unsettled is in no file,
by design.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from rise_batch.io import read_json
from rise_batch.money.journal import Spend
from rise_batch.storage import AnyPath, location

CELLS = "cells"  # a sweep's cell run directories (eval/sweep.py cell_out)
# what a file records: (folder, journal key prefix, the fields whose sum is what it says was paid)
RECORDS = (
    ("trajectories", "trajectory", ("cost_usd", "earlier_runs.cost_usd")),
    ("judgments", "judgment", ("cost_usd", "earlier_cost_usd")),
)
TOLERANCE_USD = 1e-6  # files round their figures


@dataclass
class Audit:
    """A directory's spend as the journal says it and as its files record it, and the files that say less."""

    journal: Spend = field(default_factory=Spend)
    recorded_usd: float = 0.0
    problems: list[str] = field(default_factory=list)

    legacy_usd: float = 0.0  # what files the journal has no call for record (written before it; Batch API results)

    @property
    def spent_usd(self) -> float:
        return self.journal.total_usd + self.legacy_usd


def run_dirs(directory: AnyPath) -> list[AnyPath]:
    """`directory` and, for a sweep's OUT, its cells' run directories."""
    cells = directory / CELLS
    return [directory, *(sorted(p for p in cells.iterdir() if p.is_dir()) if cells.is_dir() else [])]


def audit(directory: str | os.PathLike | AnyPath) -> Audit:
    """The journal of `directory` (a run, a sweep OUT with its cells, a structuring OUT) and its files checked
    against it."""
    result = Audit()
    for run in run_dirs(location(directory)):
        spend = Spend.read(run)
        result.journal.add(spend)
        for folder, key, fields in RECORDS:
            if (run / folder).is_dir():
                recorded, uncovered = _check_files(run / folder, key, fields, spend, result.problems)
                result.recorded_usd += recorded
                result.legacy_usd += uncovered
    return result


def judged_usd(run_dirs: list[Any]) -> float:
    """What judging these run directories has paid (a `judge --max-cost` is on judging alone): the journal's calls
    made for judgments (unsettled ones at their worst case), or what the judgment files record where the journal
    has none (judged before it existed)."""
    total = 0.0
    for run in (location(d) for d in run_dirs):
        spend = Spend.read(run)
        mine = [v for d in (spend.by_what, spend.unsettled_by_what) for k, v in d.items() if k.startswith("judgment:")]
        folder = run / "judgments"
        total += sum(mine) + (_check_files(folder, "judgment", RECORDS[1][2], spend, [])[1] if folder.is_dir() else 0)
    return round(total, 8)


def spent_usd(directory: str | os.PathLike | AnyPath) -> float:
    """Dollars `directory` (a run, a sweep OUT, a structuring OUT) has paid, every resume included."""
    return round(audit(directory).spent_usd, 8)


def record_problems(checked: Audit) -> str | None:
    """The one warning line naming the files of an audited directory that record less than was paid, or None."""
    bad = checked.problems
    if not bad:
        return None
    named = "; ".join(bad[:3]) + (f"; and {len(bad) - 3} more" if len(bad) > 3 else "")
    return (
        f"{len(bad)} trajectory/judgment file(s) record less than the spend journal says was paid ({named}); "
        "spent_usd is the journal's figure, never lowered by a file"
    )


def _check_files(
    folder: AnyPath, key: str, fields: tuple[str, ...], spend: Spend, problems: list[str]
) -> tuple[float, float]:
    """(the sane total the files of `folder` record, that of those the journal has no call for); each file that
    records less than the journal's settled calls for it goes in `problems`."""
    total = uncovered = 0.0
    for path in sorted(folder.glob("*.json")):
        try:
            record = read_json(path)
        except (OSError, ValueError):  # refused, named, where a run reads it
            continue
        if not isinstance(record, dict):
            continue
        figures = [_field(record, f) for f in fields]
        said = [v for v in figures if v is not None]
        insane = [f"{f}={v!r}" for f, v in zip(fields, figures, strict=True) if v is not None and not _sane(v)]
        own = sum(v for v in said if _sane(v))
        what = f"{key}:{path.stem}"
        paid = spend.by_what.get(what, 0.0)
        if what not in spend.by_what and what not in spend.unsettled_by_what:
            uncovered += own
        if insane:
            problems.append(f"{path.name}: {', '.join(insane)}")
        elif own + TOLERANCE_USD < paid:
            problems.append(f"{path.name}: cost ${own:.6f}, the journal ${paid:.6f}")
        total += own
    return total, uncovered


def _field(record: dict[str, Any], dotted: str) -> Any:
    value: Any = record
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _sane(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
