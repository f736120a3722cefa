"""The project's performance targets (bench/targets.yaml), each figure beside its target, its ratio and its load.

Every figure comes from a file in bench/results/ written by the benchmark that measured it; a figure whose file or
field is missing is "not measured", never guessed, so the table cannot claim a target it has no measurement for.
Each row carries the load average its benchmark recorded: wall-clock figures on a busy 2-core machine are not
comparable with idle ones.

    python -m bench.targets [--results bench/results] [--json]

Ratio = figure / target. For an upper bound (<=, <) a ratio <= 1 meets it; for a lower bound (>=) a ratio >= 1 does.
"Hold" targets compare with an earlier figure (ratio <= 1 holds it; within hold_slack is still held).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from bench.common import RESULTS, read_result

TARGETS = Path(__file__).with_name("targets.yaml")
_MANY = object()  # marks a glob step's several values


def dig(d: Any, path: list[Any]) -> Any:
    """The value at `path` (see targets.yaml) in nested dicts and lists, or None when a step is missing. A glob
    step gives the list of every match's value (those with one), to be combined."""
    for i, step in enumerate(path):
        if isinstance(step, str) and "*" in step and isinstance(d, dict):
            found = [dig(v, path[i + 1 :]) for k, v in d.items() if fnmatch.fnmatchcase(k, step)]
            found = [f for f in found if f is not None]
            return (_MANY, found) if found else None
        if isinstance(step, dict) and isinstance(d, list):
            d = next((x for x in d if isinstance(x, dict) and all(x.get(k) == v for k, v in step.items())), None)
        elif isinstance(d, dict) and isinstance(step, str | int) and step in d:
            d = d[step]
        elif isinstance(d, list) and isinstance(step, int) and -len(d) <= step < len(d):
            d = d[step]
        else:
            return None
        if d is None:
            return None
    return d


def engine_cpu_ms_per_doc(row: Any) -> float | None:
    """structure_throughput's engine CPU per document in steady state: every engine process group's CPU per
    request (fake server excluded), times requests per document."""
    per_req = dig(row, ["steady", "engine_cpu_ms_per_request"])
    if per_req is None or not row.get("docs"):
        return None
    return round(per_req * row["server_requests"] / row["docs"], 3)


DERIVED: dict[str, Callable[[Any], float | None]] = {"engine_cpu_ms_per_doc": engine_cpu_ms_per_doc}
COMBINE: dict[str, Callable[[list[float]], float]] = {"sum": lambda v: round(sum(v), 1), "max": max}


def load_rows(path: Path = TARGETS) -> tuple[list[dict[str, Any]], float]:
    """targets.yaml's rows and its hold slack; a row naming an unknown computation is refused by name."""
    doc = yaml.safe_load(path.read_text())
    rows = doc["rows"]
    for r in rows:
        missing = {"what", "file", "figure", "unit", "op", "target"} - set(r)
        if missing:
            raise SystemExit(f"{path}: row {r.get('what')!r} lacks {sorted(missing)}")
        if r.get("derive", next(iter(DERIVED))) not in DERIVED or r.get("combine", "sum") not in COMBINE:
            raise SystemExit(f"{path}: row {r['what']!r}: derive is one of {list(DERIVED)}, combine of {list(COMBINE)}")
    return rows, float(doc.get("hold_slack", 1.0))


def figure(row: dict[str, Any], results: Path) -> tuple[Any, Any, str]:
    """(figure, load, source file) of a row: from the first of its files that has the figure."""
    files = row["file"] if isinstance(row["file"], list) else [row["file"]]
    for name in files:
        doc = read_result(results / name)
        if doc is None:
            continue
        figs = doc["figures"]
        value = dig(figs, row["figure"])
        if value is None:
            continue
        if isinstance(value, tuple):
            value = COMBINE[row.get("combine", "sum")](value[1])
        if "derive" in row:
            value = DERIVED[row["derive"]](value)
        if "over" in row:
            base = dig(figs, row["over"])
            value = round(value / base, 3) if base else None
        if value is None:  # e.g. a run too short for a steady state: the next file, or "not measured"
            continue
        if "scale" in row:
            value = round(value * row["scale"], 2)
        load = dig(figs, row["load"]) if "load" in row else dig(doc, ["machine", "load_average_start"])
        if isinstance(load, tuple):
            load = load[1]
        return value, load, name
    return None, None, files[0]


def rows(results: Path, path: Path = TARGETS) -> list[dict[str, Any]]:
    """One dict per target: what, figure, unit, op, target, load, source, ratio, verdict."""
    spec, slack = load_rows(path)
    out = []
    for r in spec:
        fig, load, source = figure(r, results)
        row = {"what": r["what"], "figure": fig, "unit": r["unit"], "op": r["op"], "target": r["target"]}
        row |= {"load": load, "source": source}
        out.append(row | dict(zip(("ratio", "verdict"), verdict(row, slack), strict=True)))
    return out


def verdict(r: dict[str, Any], slack: float) -> tuple[str, str]:
    """(ratio, met) for a row; 'not measured' when its figure is missing."""
    fig, target = r["figure"], r["target"]
    if fig is None:
        return "-", "not measured"
    ratio = fig / target
    if r["op"] == ">=":
        return f"{ratio:.2f}", "met" if ratio >= 1 else "MISSED"
    if r["op"] == "bound":  # the figure bounds the target's quantity from above: only a figure within it proves it
        return f"{ratio:.2f}", "met" if ratio <= 1 else "unproven (overhead not separated)"
    if r["op"] == "hold":
        return f"{ratio:.2f}", "held" if ratio <= slack else "MISSED"
    ok = ratio < 1 if r["op"] == "<" else ratio <= 1
    return f"{ratio:.2f}", "met" if ok else "MISSED"


def fmt_load(x: Any) -> str:
    if isinstance(x, list):
        return "/".join(f"{v:.1f}" for v in x[:3] if isinstance(v, int | float)) or "-"
    return "-" if x is None else f"{x:.1f}"


def table(rs: list[dict[str, Any]]) -> str:
    lines = ["| what | figure | target | ratio | verdict | load avg | source |", "|---|---:|---:|---:|---|---|---|"]
    for r in rs:
        fig = "not measured" if r["figure"] is None else f"{r['figure']:g} {r['unit']}"
        op = "<=" if r["op"] == "bound" else r["op"]
        lines.append(
            f"| {r['what']} | {fig} | {op} {r['target']:.3g} {r['unit']} | {r['ratio']} | {r['verdict']} "
            f"| {fmt_load(r['load'])} | {r['source']} |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.targets", description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=RESULTS, help="the results directory (default bench/results)")
    ap.add_argument("--targets", type=Path, default=TARGETS, help="the targets file (default bench/targets.yaml)")
    ap.add_argument("--json", action="store_true", help="the rows as JSON instead of the markdown table")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rs = rows(args.results, args.targets)
    print(json.dumps(rs, indent=2) if args.json else table(rs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
