"""What every benchmark shares: where things are, the facts of the machine, and the one results format.

A figure means little without the machine and the moment it was measured on (2 shared cores at load 2 and at load
18 give different wall times), so every benchmark writes its figures through `Run.write`, in one envelope:

    {"bench": "index_scale", "date": "2026-12-01T10:00:00+00:00", "seconds": 812.4,
     "machine": {"cpus": 2, "load_average_start": [..], "load_average_end": [..], "memory_gb": 23.0,
                 "python": "3.12.3", "platform": "Linux-...", "git_commit": "15329bf...", "git_dirty": false},
     "args": {...the command line's options...},
     "figures": {...what the benchmark measured...}}

under bench/results/ (git-ignored: figures of one machine at one moment, not source). `bench/targets.py` reads the
figures back out of it. Paths are relative to the repository, never to this machine: the shared data sets live
beside the checkout, in `../shared/data`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"  # git-ignored
SCRATCH = REPO / "bench" / "scratch"  # git-ignored: derived corpora, indexes, structured docs
# the shared data sets beside the checkout (RISE_BENCH_DATA names them where the checkout is elsewhere)
DATA = Path(os.environ.get("RISE_BENCH_DATA") or REPO.parent / "shared" / "data")
WIKI = DATA / "wiki2015"
SQUAD = DATA / "squad_wiki"


def pct(xs: list[float], p: float) -> float:
    """The p-th percentile of `xs` by nearest rank (the value at round(p% of n-1) when sorted); nan when empty."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))] if xs else float("nan")


def git(*args: str) -> str | None:
    """`git ARGS` in the repository, or None where there is no git or no repository (a copied tree)."""
    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def memory_gb() -> float | None:
    """The machine's memory (MemTotal), in GB."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def load_average() -> list[float]:
    """The 1-, 5- and 15-minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def machine(load_start: list[float] | None = None) -> dict[str, Any]:
    """The facts that say what a figure was measured on: cores, load (at the start and now), memory, Python, the
    commit of the code measured and whether it had uncommitted changes."""
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "cpus": os.cpu_count(),
        "load_average_start": load_start,
        "load_average_end": load_average(),
        "memory_gb": memory_gb(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
    }


def _plain(value: Any) -> Any:
    """An option's value as JSON can hold it (paths as the text given, sets as sorted lists)."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, set | frozenset):
        return sorted(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class Run:
    """One benchmark run: started when its options are parsed, written once its figures are in.

    `Run(name, args)` notes the date and the load average at the start; `write(figures)` puts them in the
    envelope and writes bench/results/NAME.json (or `out`), returning the path."""

    def __init__(self, name: str, args: argparse.Namespace | dict[str, Any] | None = None) -> None:
        self.name = name
        self.args = _plain(dict(vars(args) if isinstance(args, argparse.Namespace) else args or {}))
        self.date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        self.load_start = load_average()
        self.t0 = time.monotonic()

    def envelope(self, figures: dict[str, Any]) -> dict[str, Any]:
        return {
            "bench": self.name,
            "date": self.date,
            "seconds": round(time.monotonic() - self.t0, 1),
            "machine": machine(self.load_start),
            "args": self.args,
            "figures": figures,
        }

    def write(self, figures: dict[str, Any], out: Path | str | None = None, quiet: bool = False) -> Path:
        path = Path(out) if out else RESULTS / f"{self.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.envelope(figures), indent=2, default=str) + "\n")
        if not quiet:
            print(f"wrote {path}", flush=True)
        return path


def read_result(path: Path) -> dict[str, Any] | None:
    """A results file as its envelope, or None where there is none. A file written before the envelope existed
    (its figures at the top level) is read as figures with no machine facts, said once on stderr."""
    if not path.exists():
        return None
    doc = json.loads(path.read_text())
    if isinstance(doc, dict) and "bench" in doc and isinstance(doc.get("figures"), dict):
        return doc
    print(f"{path}: written before the results envelope (no machine facts); re-run its benchmark", file=sys.stderr)
    return {"bench": None, "date": None, "machine": {}, "args": {}, "figures": doc}
