"""The whole pipeline at 1M documents, run the way a user runs it, with each stage killed once and resumed.

A private `ray start --head` (own temp dir, ports and token) and `rise-batch fake-llm` at a realistic latency; then,
each through `ray job submit` of the repository's own entry points:
  1. structure (jobs/structure_corpus.py): the heuristic tier for most documents, the LLM tier (every Nth docid, a
     docid list file) through the fake server, and the BM25 index (`index: true`); stopped once while structuring
     and once while indexing (`ray job stop`), resubmitted each time;
  2. trajectories (jobs/run_trajectories.py): RISE at K over the structured corpus against the fake agent, on
     SQuAD questions whose source article is in the derived corpus (gold: the derived documents of that article
     that hold an answer); stopped once, resubmitted;
  3. `rise-batch judge` (killed once, re-run) and `rise-batch report`.
After each resume the outputs are checked for completeness (every document a checkpoint row and a file, the index
all documents, every query a trajectory and a judgment). Per stage: wall, CPU, peak RSS/PSS of the process tree,
bytes written, output size and file count, and the load average, since the machine is shared (bench/pipeline_probe).

    python -m bench.pipeline_1m --docs 20000          # rehearsal, minutes
    python -m bench.pipeline_1m                       # 1M (derives bench/scratch/syn1m first if missing)

Writes bench/results/pipeline_1m[_<docs>].json and .md (not committed); work files under --scratch.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from bench.common import REPO, RESULTS, SCRATCH, WIKI, Run
from bench.common import SQUAD as SQUAD_DIR
from bench.pipeline_checks import check_index, check_judged, check_structure, check_trajectories, tool_latency
from bench.pipeline_prep import derived_corpus, squad_queries, tier_file
from bench.pipeline_probe import Probe, RayHead, start_fake_llm, tree_size

SQUAD = SQUAD_DIR / "queries.jsonl"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.pipeline_1m", description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--scratch", type=Path, default=SCRATCH)
    ap.add_argument("--llm-docs", type=int, default=50_000, help="LLM tier size (every docs/N-th docid)")
    ap.add_argument("--latency-ms", type=int, default=300, help="fake server latency per completion")
    ap.add_argument("--trajectories", type=int, default=200)
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--kill-at", type=float, default=0.4, help="stop each stage once at this share of its work")
    ap.add_argument("--stages", default="structure,trajectories,judge", help="comma list; later ones need earlier")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped benchmark still saves what it measured
    run = Pipeline(args)
    try:
        run.go()
    finally:
        run.close()


class Pipeline:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = (args.scratch / f"pipeline_{args.docs}").resolve()
        self.logs = self.work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.out, self.run_dir = self.work / "struct", self.work / "run_rise"
        suffix = "" if args.docs == 1_000_000 else f"_{args.docs}"
        self.result_path = RESULTS / f"pipeline_1m{suffix}.json"
        self.run = Run("pipeline_1m", args)
        self.res: dict = {"note": "see the load average per stage: the machine may be shared", "stages": {}}
        self.probe = Probe().start()
        self.head = self.fake = None

    def go(self) -> None:
        a = self.args
        corpus, self.res["corpus"] = derived_corpus(a.scratch.resolve(), a.docs, REPO)
        self.tier, self.res["llm_tier_docs"] = tier_file(self.work / "llm_tier.txt", corpus, a.llm_docs)
        self.queries, self.res["queries"] = squad_queries(
            corpus, SQUAD, WIKI, self.work / "queries.jsonl", a.trajectories
        )
        t = time.monotonic()
        self.head = RayHead(cpus=a.workers, object_store_gb=2.0, log=self.logs / "ray_head.log")
        self.fake, self.base_url = start_fake_llm(a.latency_ms, self.logs / "fake_llm.log")
        self.probe.watch("ray", self.head.proc.pid)
        self.probe.watch("fake", self.fake.pid)
        self.res["ray_head_start_s"] = round(time.monotonic() - t, 1)
        time.sleep(10)
        self.res["ray_idle"] = self.probe.window(time.monotonic() - 8, time.monotonic(), "ray")
        stages = a.stages.split(",")
        if "structure" in stages:
            self.structure(corpus)
        if "trajectories" in stages:
            self.trajectories()
        if "judge" in stages:
            self.judge_and_report()

    # ------------------------------------------------------------------ stages

    def structure(self, corpus: Path) -> None:
        a = self.args
        cfg = {
            "corpus": str(corpus),
            "out": str(self.out),
            "backend": "llm",
            "tier": str(self.tier),
            "shard_docs": 1000,
            "workers": a.workers,
            "index": True,
            "llm": {
                "base_url": self.base_url,
                "model": "gpt-5.4-nano",
                "rpm": 10_000_000,
                "tpm": 10_000_000_000,
                "concurrency": 64,
                "http_backend": "direct",
            },
        }
        path = self.write_config("structure.yaml", {"structure": cfg})
        entry = ["python", "jobs/structure_corpus.py", "--config", str(path), "--base", str(REPO)]
        n_shards = -(-a.docs // 1000)
        done = lambda: count(self.out / "stats", "shard-*.json")  # noqa: E731 - a probe, read in wait loops
        indexing = lambda: any(self.out.glob(".index.tmp-*"))  # noqa: E731
        st = self.res["stages"]
        st["structure.1 (stopped)"] = self.job("struct-1", entry, until=lambda: done() >= a.kill_at * n_shards)
        st["structure.1 (stopped)"]["shards_done_at_stop"] = done()
        st["structure.2 (resumed)"] = self.job("struct-2", entry, until=indexing, stop=False)
        st["index.2 (stopped)"] = self.job("struct-2", None, until=after(max(3.0, a.docs / 1e6 * 60)))
        st["index.3 (resumed)"] = self.job("struct-3", entry)
        meta = json.loads((self.out / "index" / "meta.json").read_text())
        size, files = tree_size(self.out / "index")
        st["index.3 (resumed)"] |= {"build_seconds_meta": meta.get("build", {}).get("seconds"), "out_gb": size}
        st["index.3 (resumed)"]["files"] = files
        size, files = tree_size(self.out, skip=("index",))
        st["structure.2 (resumed)"] |= {"out_gb": size, "files": files}
        stale = [p.name for p in self.out.glob(".index.tmp-*")]
        self.res["checks"] = {"structure": check_structure(self.out, a.docs, self.tier), "index": check_index(self.out)}
        self.res["checks"]["index"]["stale_tmp_dirs_after_kill"] = stale
        self.res["structure_stats"] = json.loads((self.out / "stats.json").read_text())

    def trajectories(self) -> None:
        a = self.args
        cfg = {
            "queries": str(self.queries),
            "system": "rise",
            "docs": str(self.out),
            "index": str(self.out / "index"),
            "out": str(self.run_dir),
            "k": a.k,
            "workers": a.workers,
            "concurrency": 8,
            "wall_clock_s": 900,
            "llm": {"base_url": self.base_url, "model": "gpt-5.4-mini", "rpm": 10_000_000, "tpm": 10_000_000_000},
        }
        path = self.write_config("run.yaml", {"run": cfg})
        entry = ["python", "jobs/run_trajectories.py", "--config", str(path), "--base", str(REPO)]
        n = sum(1 for _ in open(self.queries))
        done = lambda: count(self.run_dir / "trajectories", "*.json")  # noqa: E731
        st = self.res["stages"]
        st["trajectories.1 (stopped)"] = self.job("traj-1", entry, until=lambda: done() >= a.kill_at * n)
        st["trajectories.1 (stopped)"]["trajectories_at_stop"] = done()
        st["trajectories.2 (resumed)"] = self.job("traj-2", entry)
        size, files = tree_size(self.run_dir)
        st["trajectories.2 (resumed)"] |= {"out_gb": size, "files": files}
        self.res["checks"] = self.res.get("checks", {}) | {
            "trajectories": check_trajectories(self.run_dir, self.queries)
        }
        self.res["tool_latency_under_load"] = tool_latency(self.run_dir / "events.jsonl")

    def judge_and_report(self) -> None:
        a = self.args
        n = sum(1 for _ in open(self.queries))
        judged = lambda: count(self.run_dir / "judgments", "*.json")  # noqa: E731
        cmd = ["nice", "-n", "10", "rise-batch", "judge", str(self.run_dir), "--model", "gpt-5.4-mini"]
        cmd += ["--base-url", self.base_url]
        st = self.res["stages"]
        st["judge.1 (killed)"] = self.local("judge-1", cmd, until=lambda: judged() >= a.kill_at * n)
        st["judge.1 (killed)"]["judged_at_kill"] = judged()
        st["judge.2 (resumed)"] = self.local("judge-2", cmd)
        report = self.work / "report"
        st["report"] = self.local(
            "report", ["nice", "-n", "10", "rise-batch", "report", str(self.run_dir), "--out", str(report)]
        )
        self.res["checks"] = self.res.get("checks", {}) | {"judge": check_judged(self.run_dir, self.queries)}
        rep = json.loads((report / "report.json").read_text())
        self.res["report"] = {k: v for k, v in rep.items() if k != "runs"} | {
            "runs": [{k: v for k, v in r.items() if k != "queries"} for r in rep.get("runs", [])]
        }

    # ------------------------------------------------------------------ mechanics

    def job(self, sid: str, entry: list[str] | None, until=None, stop: bool = True) -> dict:
        """Submit `entry` as job `sid` (or keep following a running one when entry is None) until it ends or
        `until()` holds; then `ray job stop` it if `stop`. Returns the stage's probe figures."""
        t0 = time.monotonic()
        if entry is not None:
            self.clients = getattr(self, "clients", {})
            self.clients[sid] = self.head.submit(sid, entry, self.logs / f"{sid}.log", REPO)
        client = self.clients[sid]
        try:
            how = wait(client, until)
        except BaseException:  # the benchmark itself was stopped: keep this stage's figures so far
            self.res["stages"][f"{sid} (interrupted)"] = self.probe.window(t0, time.monotonic(), "ray") | {
                "end": "interrupted"
            }
            raise
        if how == "condition" and stop:
            self.head.stop_job(sid)
            how = "stopped (ray job stop)"
            client.wait(timeout=600)
        elif how == "condition":
            how = "went on (next phase)"
        elif how == "exited" and client.returncode != 0:
            raise RuntimeError(f"job {sid} failed (exit {client.returncode}); see {self.logs / sid}.log")
        fig = self.probe.window(t0, time.monotonic(), "ray") | {"end": how, "job": sid}
        fig["provider_fake_llm"] = self.probe.window(t0, time.monotonic(), "fake")
        print(f"[pipeline] {sid}: {json.dumps(fig)}", flush=True)
        self.save()
        return fig

    def local(self, name: str, cmd: list[str], until=None) -> dict:
        """Run a `rise-batch` command here (as a user runs judge and report), SIGTERM it once `until()` holds."""
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=open(self.logs / f"{name}.log", "w"), stderr=subprocess.STDOUT)  # noqa: SIM115
        self.probe.watch(name, proc.pid)
        how = wait(proc, until)
        if how == "condition":
            proc.terminate()
            proc.wait()
            how = "killed (SIGTERM)"
        elif proc.returncode != 0:
            raise RuntimeError(f"{name} exited {proc.returncode}; see {self.logs / name}.log")
        time.sleep(1.2)  # one more probe sample after the end
        fig = self.probe.window(t0, time.monotonic(), name) | {"end": how}
        print(f"[pipeline] {name}: {json.dumps(fig)}", flush=True)
        self.save()
        return fig

    def write_config(self, name: str, cfg: dict) -> Path:
        path = self.work / name
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path

    def save(self) -> None:
        self.run.write(self.res, self.result_path, quiet=True)
        self.result_path.with_suffix(".md").write_text(table(self.res))

    def close(self) -> None:
        for c in getattr(self, "clients", {}).values():
            if c.poll() is None:
                c.terminate()
        if self.fake is not None:
            self.fake.terminate()
            self.fake.wait()
        if self.head is not None:
            self.head.stop()
        self.probe.stop()
        self.save()
        print(table(self.res))
        print(f"[pipeline] wrote {self.result_path}")


def wait(proc: subprocess.Popen, until=None, every: float = 2.0) -> str:
    while proc.poll() is None:
        if until is not None and until():
            return "condition"
        time.sleep(every)
    return "exited"


def after(seconds: float):
    deadline = time.monotonic() + seconds
    return lambda: time.monotonic() >= deadline


def count(d: Path, pattern: str) -> int:
    return sum(1 for _ in d.glob(pattern)) if d.exists() else 0


def table(res: dict) -> str:
    """docs/cluster.md's 'At 1M' table: one row per stage."""
    rows = ["| stage | end | wall s | CPU s | peak RSS GB (PSS) | written GB | out GB / files | load 1m mean (max) |"]
    rows.append("|---|---|---|---|---|---|---|---|")
    for name, s in res.get("stages", {}).items():
        out = f"{s['out_gb']} / {s['files']:,}" if "files" in s else ""
        pss = f" ({s['peak_pss_gb']})" if s.get("peak_pss_gb") is not None else ""
        load = s["loadavg_1m"]
        end = s["end"].split(":")[0]
        rows.append(
            f"| {name} | {end} | {s['wall_s']} | {s['cpu_s']} | {s['peak_rss_gb']}{pss} | {s['written_gb']} | {out} "
            f"| {load['mean']} ({load['max']}) |"
        )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    main()
