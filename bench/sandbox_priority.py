"""What the agents' commands take from the harness: a harness-side CPU burst beside busy sandboxes, by niceness.

Issue 14's rows for search and the sandbox under the trajectory load miss because tool threads wait for a core.
Each sandboxed command used to be its own session, which autogroup scheduling weighs like a whole trajectory actor;
now a sandbox's commands run niced (`SandboxLimits.nice`, RunConfig `bash_nice`, default 10) in one niced session.
This bench starts N long-lived sandboxes, each running a CPU-bound command (an agent's `rg` over a big workspace
stands for it), and meanwhile times in this process a 10 ms CPU burst in a thread (what a search or a hardlinking
pass is for the harness) and a `true` call in another sandbox. Rounds alternate nice=0 (the old weighting) and the
default, so load drifts over both alike.

    python bench/sandbox_priority.py [--sandboxes 4] [--rounds 4] [--out bench/results/sandbox_priority.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import threading
import time
from pathlib import Path

from rise_batch.space.sandbox import Sandbox, SandboxLimits

REPO = Path(__file__).resolve().parents[1]
BUSY = "end=$((SECONDS+{s})); while [ $SECONDS -lt $end ]; do :; done"


def pcts(xs: list[float]) -> dict:
    xs = sorted(xs)
    at = lambda p: xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]  # noqa: E731
    return {"n": len(xs), "p50_ms": round(at(50), 2), "p90_ms": round(at(90), 2), "p99_ms": round(at(99), 2)}


def burst_ms(cpu_s: float = 0.01) -> float:
    """Wall time of `cpu_s` of this thread's CPU: equal to it on a free core, longer by the wait for one."""
    t, c = time.perf_counter(), time.thread_time()
    while time.thread_time() - c < cpu_s:
        pass
    return (time.perf_counter() - t) * 1000


def one_round(root: Path, limits: SandboxLimits, n: int, seconds: int, probes: int) -> dict:
    boxes = [Sandbox(root, limits) for _ in range(n + 1)]
    for b in boxes:
        b.run("true")  # started, and its session niced, before the clock
    busy = [threading.Thread(target=b.run, args=(BUSY.format(s=seconds),)) for b in boxes[:n]]
    for t in busy:
        t.start()
    time.sleep(0.5)
    bursts, trues = [], []
    for _ in range(probes):
        bursts.append(burst_ms())
        trues.append(boxes[n].run("true").elapsed_s * 1000)
        time.sleep(0.02)
    for t in busy:
        t.join()
    for b in boxes:
        b.close()
    return {"burst_10ms_cpu": pcts(bursts), "sandbox_true": pcts(trues), "load_1m": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sandboxes", type=int, default=4, help="busy sandboxes (agents' commands) beside the probe")
    ap.add_argument("--rounds", type=int, default=4, help="rounds, alternating nice=0 and the default")
    ap.add_argument("--probes", type=int, default=60)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "sandbox_priority.json")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rise-bench-prio-"))
    os.chmod(root, 0o755)
    (root / "a.txt").write_text("x\n")
    default = SandboxLimits(timeout_s=60)
    seconds = max(4, args.probes // 10)
    res: dict = {"sandboxes": args.sandboxes, "default_nice": default.nice, "rounds": []}
    for r in range(args.rounds):
        nice = 0 if r % 2 == 0 else default.nice
        row = one_round(root, dataclasses.replace(default, nice=nice), args.sandboxes, seconds, args.probes)
        res["rounds"].append({"nice": nice, **row})
        b, t = row["burst_10ms_cpu"], row["sandbox_true"]
        print(
            f"nice {nice:2d}: 10 ms harness burst p50/p99 {b['p50_ms']}/{b['p99_ms']} ms; "
            f"`true` in a sandbox {t['p50_ms']}/{t['p99_ms']} ms; load {row['load_1m']:.1f}",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
