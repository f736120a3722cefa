"""The index build's memory inside the structure job vs on its own, side by side.

In turn:
  * standalone: `rise-batch index --corpus C --workers 2` (its local process runner);
  * in the job: `jobs/structure_corpus.py --index` resumed over a finished heuristic structure run of C (every
    shard is already done, so the job starts its Ray actors, skips the shards and builds OUT/index, which is what
    the 1M pipeline's resubmitted index stage did), on a local Ray, or with `--submit` through `ray job submit` to
    a private `ray start --head` (whose whole process tree is measured: raylet, workers, the job's driver).
Each run's process tree is sampled every 0.1 s (bench/treemem.py): peak summed PSS and RSS, and who held what at
the PSS peak; the job's figures are also given for its index stage alone (while OUT/.index.tmp-* exists). The
index files' digests (all but meta.json, which records timings) must be equal across both runs, or it exits 1.

    nice -n 10 python -m bench.index_in_job --corpus bench/scratch/syn200k --struct bench/scratch/s200k
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.common import REPO, SCRATCH, Run
from bench.pipeline_probe import RayHead
from bench.treemem import TreeMemory


def digests(index_dir: Path) -> dict[str, str]:
    """sha256 of every index file but meta.json (it records the build's timings, runner and shard count)."""
    out = {}
    for f in sorted(index_dir.iterdir()):
        if f.name != "meta.json":
            h = hashlib.sha256()
            with open(f, "rb") as fh:
                while chunk := fh.read(1 << 24):
                    h.update(chunk)
            out[f.name] = h.hexdigest()
    return out


def measured(cmd: list[str], code: Path, out_dir: Path, log: Path, env: dict | None = None, roots=None) -> dict:
    """Run `cmd` from checkout `code`; peaks of its tree (or of `roots()`), the index stage apart."""
    env = dict(env or os.environ, PYTHONPATH=str(code), PYTHONHASHSEED="0", DISABLE_TQDM="1")

    def phase() -> str:
        return "index" if any(out_dir.parent.glob(f".{out_dir.name}.tmp-*")) else "other"

    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    with open(log, "a") as fh:
        p = subprocess.Popen(cmd, cwd=code, env=env, stdout=fh, stderr=subprocess.STDOUT)
        mon = TreeMemory(roots or [p.pid], 0.1, phase=phase)
        rc = p.wait()
    res = mon.stop() | {"wall_s": round(time.perf_counter() - t0, 1), "exit": rc, "cmd": " ".join(cmd)}
    res["loadavg_1m_start_end"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    if rc != 0:
        raise SystemExit(f"{cmd} exited {rc}; see {log}")
    return res


def run_checkout(tag: str, code: Path, a: argparse.Namespace, head) -> dict:
    py = sys.executable
    corpus, struct = a.corpus.resolve(), a.struct.resolve()
    log = a.scratch / f"{tag}.log"
    standalone = a.scratch / f"standalone-{tag}"
    res: dict = {"code": str(code)}
    cmd = [py, "-m", "rise_batch.cli", "index", "--corpus", str(corpus), "--out", str(standalone)]
    cmd += ["--workers", "2", "--shard-docs", str(a.shard_docs), "--overwrite", "--no-progress"]
    res["standalone"] = measured(cmd, code, standalone, log)
    res["standalone"]["digests"] = digests(standalone)
    shutil.rmtree(standalone)
    shutil.rmtree(struct / "index", ignore_errors=True)
    job = ["python", "jobs/structure_corpus.py", "--corpus", str(corpus), "--out", str(struct)]
    job += ["--backend", "heuristic", "--workers", "2", "--shard-docs", str(a.shard_docs), "--index"]
    job += ["--no-progress"]
    if head is None:
        res["in_job"] = measured([py, *job[1:]], code, struct / "index", log)
    else:
        # the job's driver numbers the vocabulary: the same string-hash seed as the standalone build, through Ray
        seed = json.dumps({"env_vars": {"PYTHONHASHSEED": "0"}})
        sub = [a.ray, "job", "submit", "--address", head.dashboard, "--working-dir", "."]
        sub += ["--runtime-env-json", seed, "--", *job]
        res["in_job"] = measured(sub, code, struct / "index", log, env=head.env, roots=lambda: [head.proc.pid])
    res["in_job"]["digests"] = digests(struct / "index")
    return res


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.index_in_job", description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--struct", type=Path, required=True, help="a finished heuristic structure run of --corpus")
    ap.add_argument("--shard-docs", type=int, default=1000, help="the structure run's --shard-docs")
    ap.add_argument("--submit", action="store_true", help="ray job submit to a private ray start --head")
    ap.add_argument("--scratch", type=Path, default=SCRATCH / "index_in_job")
    ap.add_argument("--out", type=Path, help="the results file (default bench/results/index_in_job.json)")
    return ap


def main(argv: list[str] | None = None) -> None:
    a = build_parser().parse_args(argv)
    run = Run("index_in_job", a)
    a.ray = shutil.which("ray") or "ray"
    a.scratch.mkdir(parents=True, exist_ok=True)
    head = None
    if a.submit:
        head = RayHead(cpus=2, object_store_gb=2.0, log=a.scratch / "ray_head.log")
    try:
        results: dict = run_checkout("run", REPO, a, head)
    finally:
        if head is not None:
            head.stop()
    results["identical_index_files"] = results["standalone"]["digests"] == results["in_job"]["digests"]
    results["summary"] = summary(results)
    print(json.dumps(results["summary"], indent=1))
    print(f"index files identical in the job and standalone: {results['identical_index_files']}")
    run.write(results, a.out)
    sys.exit(0 if results["identical_index_files"] else 1)


def summary(r: dict) -> dict:
    s, j = r["standalone"], r["in_job"]
    ji = j.get("phases", {}).get("index", {})
    return {
        "standalone_pss_gb": s["peak_pss_gb"],
        "standalone_rss_gb": s["peak_rss_gb"],
        "job_index_stage_pss_gb": ji.get("peak_pss_gb"),
        "job_index_stage_rss_gb": ji.get("peak_rss_gb"),
        "job_whole_pss_gb": j["peak_pss_gb"],
        "job_over_standalone_pss": round(ji["peak_pss_gb"] / s["peak_pss_gb"], 3) if ji else None,
        "standalone_wall_s": s["wall_s"],
        "job_wall_s": j["wall_s"],
        "load": [s["loadavg_1m_start_end"], j["loadavg_1m_start_end"]],
    }


if __name__ == "__main__":
    main()
