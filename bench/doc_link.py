"""Per-document cost of placing a search's union in a workspace: before and after documents were opened safely.

Before (`--before`, loaded with `git show REV:rise_batch/space/workspace.py`): one `link(2)` of the corpus path.
Now: `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` as O_PATH, fstat, `linkat(AT_EMPTY_PATH)` from the descriptor,
close. Also the two fallbacks: one O_NOFOLLOW open per path component (kernels or seccomp filters without openat2),
and the link through /proc/self/fd/N checked by lstat (no CAP_DAC_READ_SEARCH).

Docs: wiki2015's 26,887 articles as DIR/corpus/<relpath> (written once under the scratch dir, as
bench/workspace.py does). Each round links a random union of `--union` documents (3 sub-queries x K=1000 give
~2,800-3,000) into a fresh workspace with `Workspace.add`, once per variant, interleaved so that the machine's load
hits all alike; the workspace's creation and removal are not timed. Reports p50/p99 of the union's wall and CPU
time and the p50 per document, with the load average around the run (the machine is shared).

    python bench/doc_link.py [--rounds 40] [--union 2800] [--before 998e7ad] [--out bench/results/doc_link.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workspace import DATA, SCRATCH, load_module_at, materialize_docs, pct  # noqa: E402

from rise_batch.space import safe_open  # noqa: E402
from rise_batch.space.workspace import Workspace  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, default=DATA / "wiki2015")
    ap.add_argument("--scratch", type=Path, default=SCRATCH / "workspace_bench")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--union", type=int, default=2800)
    ap.add_argument("--before", default="998e7ad", help="the commit whose workspace.py is 'before'")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "doc_link.json")
    args = ap.parse_args()

    args.scratch.mkdir(parents=True, exist_ok=True)
    store = materialize_docs(args.corpus, args.scratch / "wiki2015_docs")
    before = load_module_at(args.before, "rise_batch/space/workspace.py", "workspace_before")
    old_store = before.DocStore(store.dir, store.relpath)
    k = safe_open._kernel()

    def now(flags: dict):
        def make(path: Path):
            k.openat2, k.empty_path = None, None
            for name, value in flags.items():
                setattr(k, name, value)
            return Workspace(path, store)

        return make

    variants = {
        "before (link of the path)": lambda p: before.Workspace(p, old_store),
        "now (openat2 + linkat AT_EMPTY_PATH)": now({}),
        "now, no openat2 (O_NOFOLLOW per component)": now({"openat2": False}),
        "now, no CAP_DAC_READ_SEARCH (link via /proc + lstat)": now({"empty_path": False}),
    }
    ids = list(store.relpath)
    rng = random.Random(0)
    parent = Path(tempfile.mkdtemp(prefix="rise-doc-link-ws-", dir=args.scratch))
    wall: dict[str, list[float]] = {v: [] for v in variants}
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    load_start = os.getloadavg()
    for r in range(args.rounds + 3):  # 3 warm-up rounds (page cache of the corpus directories)
        union = rng.sample(ids, args.union)
        for name, make in variants.items():
            ws = make(parent / "ws")
            t, c = time.perf_counter(), time.process_time()
            ws.add(union)
            t, c = time.perf_counter() - t, time.process_time() - c
            assert len(ws) == args.union, name
            shutil.rmtree(parent / "ws")
            if r >= 3:
                wall[name].append(t * 1000)
                cpu[name].append(c * 1000)
    shutil.rmtree(parent, ignore_errors=True)
    k.openat2, k.empty_path = None, None
    result = {
        "docs": str(store.dir),
        "n_docs": len(ids),
        "union": args.union,
        "rounds": args.rounds,
        "before": args.before,
        "loadavg": [load_start, os.getloadavg()],
        "variants": {},
    }
    base = pct(wall["before (link of the path)"], 50)
    print(f"{args.union:,}-document unions over {len(ids):,} docs, {args.rounds} rounds; load {load_start} -> "
          f"{os.getloadavg()}")  # fmt: skip
    for name in variants:
        p50, p99, c50 = pct(wall[name], 50), pct(wall[name], 99), pct(cpu[name], 50)
        row = {
            "union_wall_p50_ms": round(p50, 2),
            "union_wall_p99_ms": round(p99, 2),
            "union_cpu_p50_ms": round(c50, 2),
            "per_doc_wall_p50_us": round(p50 * 1000 / args.union, 2),
            "per_doc_cpu_p50_us": round(c50 * 1000 / args.union, 2),
            "vs_before_p50": round(p50 / base, 2),
        }
        result["variants"][name] = row
        print(
            f"  {name:<55} union p50 {p50:7.2f} / p99 {p99:7.2f} ms (CPU p50 {c50:6.2f} ms); "
            f"per doc {row['per_doc_wall_p50_us']:5.2f} us; x{row['vs_before_p50']} of before"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
