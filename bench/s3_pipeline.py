"""The pipeline with everything on a local S3 server (SeaweedFS) vs everything on local disk, on 2 workers.

Stages, each a `rise-batch` command as a user runs it (wall time per stage, bytes moved):
  1. upload (S3 only): the derived corpus's Parquet files put into the bucket;
  2. structure: the heuristic tier over the corpus, with `--index`, on 2 workers;
  3. run: RISE over SQuAD questions against the fake agent server, on 2 workers; with S3 the docs tree and the
     index are made by each node's workers in its node-local cache (`--cache-dir`): per node, bytes fetched,
     seconds to materialize, seconds from its worker's start to its first trajectory;
  4. run again (S3 only), into another run directory: the caches are reused (nothing fetched).
The cluster is the tests' 2-node Ray cluster on this machine (tests/two_nodes.py: node B in its own mount
namespace, so the cache directory is node-local; needs root and unshare), else a local Ray of 2 workers (one node).
The corpus is derived from ../shared/data/wiki2015 by bench/derive_corpus.py (see bench/pipeline_prep.py).

    python -m bench.s3_pipeline                  # 20k documents, 40 queries
    python -m bench.s3_pipeline --docs 100000

Writes bench/results/s3_pipeline_<docs>.json (not committed); work files under --scratch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.common import REPO, RESULTS, SCRATCH, SQUAD, WIKI, Run
from bench.pipeline_prep import derived_corpus, short, squad_queries
from bench.pipeline_probe import start_fake_llm, tree_size


def cli(args: list, env: dict, address: str | None) -> tuple[dict, float, str]:
    """`rise-batch ARGS --json` (on the cluster at `address`): (its stats, wall seconds, stderr)."""
    cmd = [sys.executable, "-m", "rise_batch.cli", *map(str, args), "--json"]
    cmd += ["--ray-address", address] if address else []
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[3:6])} exited {r.returncode}:\n{r.stderr[-4000:]}")
    out = r.stdout[r.stdout.index("{") :]
    return json.loads(out[: out.rindex("}") + 1]), round(wall, 2), r.stderr


def object_bytes(uri: str) -> int:
    from rise_batch.storage import location

    return sum(n for _, n in location(uri).list(recursive=True))


class Bench:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.work = a.scratch / f"s3bench{short(a.docs)}"
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        os.chmod(self.work, 0o755)
        self.corpus, self.res = None, {"docs": a.docs, "queries": a.queries, "workers": 2}
        self.run = Run("s3_pipeline", a)

    def prepare(self) -> None:
        self.corpus, self.res["corpus"] = derived_corpus(self.a.scratch, self.a.docs, REPO)
        self.queries, self.res["query_info"] = squad_queries(
            self.corpus, SQUAD / "queries.jsonl", WIKI, self.work / "q.jsonl",
            self.a.queries,
        )  # fmt: skip
        self.res["corpus_bytes"] = sum(f.stat().st_size for f in self.corpus.glob("*.parquet"))

    def stages(self, mode: str, env: dict, address: str | None, cache: Path | None, base: str, url: str) -> dict:
        """structure then run (twice on S3) with every location under `base` (a directory or an s3:// prefix)."""
        st: dict = {}
        corpus = str(self.corpus)
        if mode == "s3":
            from rise_batch.storage import location

            t0 = time.perf_counter()
            for f in sorted(self.corpus.glob("*.parquet")):
                location(f"{base}/corpus/{f.name}").upload(f)
            st["upload"] = {"wall_s": round(time.perf_counter() - t0, 2), "bytes": self.res["corpus_bytes"]}
            corpus = f"{base}/corpus"
        out = f"{base}/out"
        stats, wall, _ = cli(["structure", "--corpus", corpus, "--out", out, "--backend", "heuristic", "--index",
                              "--workers", 2, "--no-progress"], env, address)  # fmt: skip
        size = object_bytes(out) if mode == "s3" else int(tree_size(Path(out))[0] * 2**30)
        st["structure"] = {"wall_s": wall, "docs": stats.get("docs_total"), "bytes_written": size}
        config = self.work / f"{mode}-run.yaml"
        config.write_text("worker_cpus: 2\n" if address else "")  # one actor per node on the 2-node cluster
        for i, name in enumerate(("run", "run again") if mode == "s3" else ("run",)):
            args = ["run", "--config", config, "--queries", self.queries, "--system", "rise", "--docs", out,
                    "--index", f"{out}/index", "--out", f"{base}/run{i}", "--workers", 2, "--concurrency", 8,
                    "--base-url", url, "--model", "gpt-5.4-mini", "--rpm", 10**6, "--tpm", 10**10,
                    "--no-progress"]  # fmt: skip
            if cache is not None:
                args += ["--cache-dir", cache]
            stats, wall, _ = cli(args, env, address)
            st[name] = {"wall_s": wall, "trajectories": stats["trajectories"], "stop_reasons": stats["stop_reasons"],
                        "nodes": stats.get("nodes"), "cache": stats.get("cache")}  # fmt: skip
        return st

    def main(self) -> None:
        self.prepare()
        cluster = None
        from tests.two_nodes import TwoNodes, can_run

        why = can_run() if not self.a.one_node else "--one-node"
        env = dict(os.environ, OPENAI_API_KEY="x", PYTHONPATH=str(REPO))
        if why is None:
            cluster = TwoNodes()
            env |= cluster.env
        self.res["cluster"] = "2-node Ray (tests/two_nodes.py)" if cluster else f"local Ray, one node ({why})"
        address = cluster.address if cluster else None
        fake, url = start_fake_llm(self.a.latency_ms, self.work / "fake.log")
        from tests.s3 import S3Server

        s3 = S3Server()
        try:
            env_s3 = env | s3.env
            os.environ.update(s3.env)  # this process lists the bucket too
            self.res["posix"] = self.stages("posix", env, address, None, str(self.work / "posix"), url)
            cache = (cluster.local if cluster else self.work) / "cache"
            self.res["s3"] = self.stages("s3", env_s3, address, cache, s3.uri("bench"), url)
        finally:
            s3.stop()
            fake.terminate()
            if cluster:
                cluster.stop()
        print(json.dumps(self.res, indent=2))
        self.run.write(self.res, self.a.out or RESULTS / f"s3_pipeline_{short(self.a.docs)}.json")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.s3_pipeline", description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--latency-ms", type=int, default=50, help="the fake server's latency per call")
    ap.add_argument("--scratch", type=Path, default=SCRATCH)
    ap.add_argument("--one-node", action="store_true", help="a local Ray even where the 2-node cluster can run")
    ap.add_argument("--out", type=Path, help="the results file (default bench/results/s3_pipeline_<docs>.json)")
    return ap


def main(argv: list[str] | None = None) -> None:
    Bench(build_parser().parse_args(argv)).main()


if __name__ == "__main__":
    main()
