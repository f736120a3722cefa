"""Honest memory of a process tree: summed RSS and summed PSS, sampled often, with who held what at the peak.

Summed RSS counts a shared page once per process that maps it: the libraries every Python process loads, a Ray
object-store segment every worker maps, an mmapped index. PSS (proportional set size) divides each shared page
among the processes that map it, so the tree's summed PSS counts every page of the tree once (pages shared with
processes outside the tree are divided with them too, so it is a slight under-count there). Both come from
/proc/PID/smaps_rollup, one read per process, cheap enough for a 0.1 s period, so a short peak (the merge of an
index build lasts seconds) is not missed. The page cache of files a process wrote or read is in neither figure.

    python -m bench.treemem -- CMD ...     # runs CMD, prints its tree's peaks as JSON on stderr
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

GB = 1024**3
FIELDS = ("Rss", "Pss", "Pss_Anon", "Pss_File", "Pss_Shmem", "Private_Clean", "Private_Dirty")


def rollup(pid: int) -> dict[str, int] | None:
    """The process's smaps_rollup in bytes (None once it is gone or not readable)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    out: dict[str, int] = {}
    for line in text.splitlines()[1:]:
        key, _, rest = line.partition(":")
        if key in FIELDS:
            out[key] = int(rest.split()[0]) * 1024
    return out if "Pss" in out else None


def children_of(roots: Iterable[int]) -> list[int]:
    """`roots` and all their descendants (from /proc/*/stat ppid links), roots first."""
    parent: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        parent.setdefault(ppid, []).append(int(entry.name))
    seen: list[int] = []
    todo = [r for r in roots]
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.append(pid)
        todo.extend(parent.get(pid, ()))
    return seen


def label(pid: int) -> str:
    """A short name for a process: Ray's process title (raylet, ray::Worker...), else its command's script."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [w.decode(errors="replace") for w in cmd if w]
    if not words:
        return "?"
    first = words[0]
    if first.startswith("ray::") or "/" not in first and " " in first:
        return first.split()[0][:40]
    for w in words[1:]:
        if w.endswith(".py") or w.startswith("rise_batch"):
            return f"{Path(first).name} {Path(w).name}"[:60]
    return Path(first).name[:40]


class _Peaks:
    """Peak summed RSS / PSS / USS of the samples of one phase, and who held what at its PSS peak."""

    def __init__(self) -> None:
        self.rss = self.pss = self.uss = 0
        self.samples = 0
        self.at_peak: dict[str, dict[str, float]] = {}

    def add(self, rss: int, pss: int, uss: int, per: dict[int, dict[str, int]]) -> None:
        self.samples += 1
        self.rss, self.uss = max(self.rss, rss), max(self.uss, uss)
        if pss <= self.pss:
            return
        self.pss = pss
        self.at_peak = {}
        for pid, r in per.items():
            row = self.at_peak.setdefault(label(pid), {"n": 0, "rss_gb": 0.0, "pss_gb": 0.0, "shmem_gb": 0.0})
            row["n"] += 1
            row["rss_gb"] += r["Rss"] / GB
            row["pss_gb"] += r["Pss"] / GB
            row["shmem_gb"] += r.get("Pss_Shmem", 0) / GB

    def to_json(self) -> dict:
        top = sorted(self.at_peak.items(), key=lambda kv: -kv[1]["pss_gb"])
        return {
            "peak_rss_gb": round(self.rss / GB, 3),
            "peak_pss_gb": round(self.pss / GB, 3),
            "peak_uss_gb": round(self.uss / GB, 3),
            "samples": self.samples,
            "at_pss_peak": {k: {f: round(x, 3) for f, x in v.items()} for k, v in top[:8]},
        }


class TreeMemory:
    """Samples a process tree in a thread: peak summed RSS, peak summed PSS, and the breakdown at the PSS peak.

    `roots` is a list of pids, or a callable returning one (for trees whose root is found later, e.g. a Ray
    head's processes). `phase()` names the stage each sample belongs to (e.g. "index" while an index build's
    temporary directory exists); peaks are kept for the whole run and per phase. `on_sample(total_rss, pids)` may
    act on each sample (a memory guard that kills)."""

    def __init__(
        self,
        roots: list[int] | Callable[[], list[int]],
        period: float = 0.1,
        on_sample: Callable[[int, list[int]], None] | None = None,
        phase: Callable[[], str | None] | None = None,
    ) -> None:
        self.roots, self.period, self.on_sample, self.phase = roots, period, on_sample, phase
        self.whole = _Peaks()
        self.phases: dict[str, _Peaks] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    @property
    def peak_rss(self) -> int:
        return self.whole.rss

    @property
    def peak_pss(self) -> int:
        return self.whole.pss

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period)

    def sample(self) -> None:
        name = self.phase() if self.phase is not None else None
        roots = self.roots() if callable(self.roots) else self.roots
        pids = children_of(roots)
        rss = pss = uss = 0
        per: dict[int, dict[str, int]] = {}
        for pid in pids:
            r = rollup(pid)
            if r is None:
                continue
            per[pid] = r
            rss += r["Rss"]
            pss += r["Pss"]
            uss += r.get("Private_Clean", 0) + r.get("Private_Dirty", 0)
        self.whole.add(rss, pss, uss, per)
        if name:
            self.phases.setdefault(name, _Peaks()).add(rss, pss, uss, per)
        if self.on_sample is not None:
            self.on_sample(rss, pids)

    def stop(self) -> dict:
        """Stop sampling; the figures as JSON-ready numbers (GB, 3 decimals), per phase under "phases"."""
        self._stop.set()
        self._t.join()
        out = self.whole.to_json() | {"period_s": self.period}
        if self.phases:
            out["phases"] = {k: v.to_json() for k, v in self.phases.items()}
        return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m bench.treemem", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- and the command to run")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        build_parser().error("no command: python -m bench.treemem -- CMD ...")
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    p = subprocess.Popen(cmd)
    mon = TreeMemory([p.pid])
    rc = p.wait()
    res = mon.stop() | {"wall_s": round(time.perf_counter() - t0, 1), "exit": rc}
    res["loadavg_1m_start_end"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    print("TREEMEM " + json.dumps(res), file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
