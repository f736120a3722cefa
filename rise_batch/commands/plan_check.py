"""The plan a run or a sweep followed, kept in its directory, and the line that checks it once the rest has run:
`planned $X [low, high], spent $Y`.

`run --plan` writes RUN_DIR/plan.json and `sweep --plan` OUT/plan.json: the plan as printed with `--json`, and what
the directories had paid when it was made (`spent_usd_at_plan`). The run or sweep that follows in the same
directory prints what the plan said beside what the directories paid since: `rise_batch.money.spent.spent_usd`, the
one figure of what a directory has paid, less what it had paid at the plan (the pilot). A plan of other settings
(another config hash, cells the sweep does not have) checks nothing and prints nothing.
"""

from __future__ import annotations

from typing import Any

from rise_batch.agent.pilot import usd
from rise_batch.io import read_json, write_json_atomic
from rise_batch.money.spent import spent_usd
from rise_batch.storage import AnyPath, child, location

PLAN_FILE = "plan.json"


def paid(directories: list[AnyPath]) -> float:
    """What `directories` (a run directory, or a sweep's cell directories) have paid, every resume included."""
    return sum(spent_usd(d) for d in directories)


def save_plan(out: str, plan: dict[str, Any], directories: list[AnyPath]) -> None:
    """The plan, kept in `out` with what `directories` had paid when it was made."""
    write_json_atomic(location(child(out, PLAN_FILE)), plan | {"spent_usd_at_plan": round(paid(directories), 9)})


def saved_plan(out: str) -> dict[str, Any] | None:
    """The plan kept in `out`, or None when there is none."""
    path = location(child(out, PLAN_FILE))
    return read_json(path) if path.exists() else None


def planned_line(plan: dict[str, Any], spent_total: float) -> tuple[str, dict[str, Any]]:
    """`planned $X [low, high], spent $Y` for the queries after the pilot, and the same figures for --json."""
    c, at_plan = plan["cost_usd"], float(plan.get("spent_usd_at_plan") or 0.0)
    spent = spent_total - at_plan
    est, low, high, got, total, pilot = usd(c["estimate"], c.get("low"), c.get("high"), spent, spent_total, at_plan)
    planned = f"planned {est} [{low}, {high}]" if c.get("low") is not None else f"planned {est} (no interval)"
    line = (
        f"{planned}, spent {got} on the {plan['remaining_queries']} queries after the pilot ({total} in all, the "
        f"pilot's {pilot} included)"
    )
    return line, {"planned_usd": c, "spent_usd": round(spent, 9), "spent_usd_in_all": round(spent_total, 9)}


def check_run(out: str, config_hash: str) -> tuple[str, dict[str, Any]] | None:
    """After a run: the line, when RUN_DIR keeps a plan of the same settings."""
    plan = saved_plan(out)
    if plan is None or plan.get("config_hash") != config_hash:
        return None
    return planned_line(plan, paid([location(out)]))


def check_sweep(out: str, cell_dirs: dict[str, AnyPath]) -> tuple[str, dict[str, Any]] | None:
    """After a sweep: the line, when OUT keeps a plan whose cells are all cells of the sweep (`cell_dirs`: id ->
    directory), for those cells."""
    plan = saved_plan(out)
    if plan is None or not {c["cell"] for c in plan["cells"]} <= set(cell_dirs):
        return None
    left = sum(c["remaining_queries"] for c in plan["cells"])
    whole = plan["total"] | {"remaining_queries": left, "spent_usd_at_plan": plan.get("spent_usd_at_plan")}
    return planned_line(whole, paid([cell_dirs[c["cell"]] for c in plan["cells"]]))
