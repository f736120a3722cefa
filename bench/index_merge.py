"""The BM25 merge, serial vs parallel, and the index build's scaling with workers, in one run on one machine.

Part 1, the merge alone: the corpus is tokenized once (its shards spilled to disk as a build spills them), the
global statistics made, then `assemble` (scoring and scattering every posting into the CSC arrays, the part of
the merge that grows with the corpus) is timed with 1 worker and with each of --workers, best of --repeat, on the same
statistics; the arrays must be byte-identical. Part 2, the whole build: `build_index` with each of 1 and --workers
(tokenizing processes and merge threads alike), wall seconds, the "merged and saved" seconds it logs, and the
index's arrays compared byte for byte.

    RISE_BENCH_DATA=../shared/data python -m bench.index_merge --files 2 --workers 2

Writes bench/results/index_merge.json.
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import WIKI, Run
from rise_batch.index.build import _tokenize_all, build_index
from rise_batch.index.merge import GlobalStats, assemble
from rise_batch.index.plan import plan_index_shards
from rise_batch.index.shards import ProcessShardRunner
from rise_batch.index.tokenize import TokenizerSettings

ARRAYS = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy")


def corpus_subset(files: int, scratch: Path) -> Path:
    """The first `files` Parquet files of wiki2015, linked into a folder of their own (nothing is copied)."""
    folder = scratch / "corpus"
    folder.mkdir()
    for src in sorted(WIKI.glob("*.parquet"))[:files]:
        (folder / src.name).symlink_to(src)
    return folder


def merge_alone(corpus: Path, scratch: Path, workers: list[int], repeat: int, shard_docs: int) -> dict:
    shards = plan_index_shards(corpus, shard_docs)
    t0 = time.perf_counter()
    run = _tokenize_all(shards, ProcessShardRunner(max(workers)), TokenizerSettings(), "skip", scratch / "spill")
    tokenize_s = time.perf_counter() - t0
    stats = GlobalStats(run.merger, 1.5, 0.75)
    fetch = lambda i: run.fetchers[i]()  # noqa: E731
    assemble(stats, fetch, workers=1)  # numba's compile and the page cache, out of the timings
    out: dict = {"docs": stats.n_docs, "postings": stats.n_postings, "shards": len(shards), "tokenize_s": tokenize_s}
    ref = None
    for w in [1, *workers]:
        best = float("inf")
        for _ in range(repeat):
            t = time.perf_counter()
            arrays = assemble(stats, fetch, workers=w)
            best = min(best, time.perf_counter() - t)
        if ref is None:
            ref = arrays
        same = all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(arrays, ref, strict=True))
        out[f"assemble_s_workers_{w}"] = round(best, 3)
        out[f"identical_workers_{w}"] = same
        print(f"assemble, {w} worker(s): {best:.2f} s (best of {repeat}), byte-identical to 1 worker: {same}")
    return out


def whole_build(corpus: Path, scratch: Path, workers: list[int], shard_docs: int) -> dict:
    out: dict = {}
    ref: dict[str, bytes] = {}
    for w in [1, *workers]:
        lines: list[str] = []
        t = time.perf_counter()
        build_index(corpus, scratch / f"ix{w}", workers=w, shard_docs=shard_docs, on_bad_row="skip", log=lines.append)
        wall = time.perf_counter() - t
        merged = next(float(m.group(1)) for x in lines if (m := re.match(r"merged and saved in ([\d.]+)s", x)))
        arrays = {a: (scratch / f"ix{w}" / a).read_bytes() for a in ARRAYS}
        ref = ref or arrays
        out[f"build_s_workers_{w}"] = round(wall, 2)
        out[f"merge_and_save_s_workers_{w}"] = merged
        out[f"identical_workers_{w}"] = arrays == ref
        print(f"build, {w} worker(s): {wall:.1f} s, merged and saved in {merged:.1f} s, same arrays: {arrays == ref}")
        shutil.rmtree(scratch / f"ix{w}")
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.index_merge", description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2, help="wiki2015 Parquet files to index (of 8)")
    ap.add_argument("--workers", default="2", help="comma-separated worker counts compared with 1")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--shard-docs", type=int, default=500)
    ap.add_argument("--skip-build", action="store_true", help="time the merge alone")
    return ap


def main() -> None:
    args = build_parser().parse_args()
    run = Run("index_merge", args)
    workers = [int(w) for w in args.workers.split(",")]
    scratch = Path(tempfile.mkdtemp(prefix="rise-merge-bench-"))
    try:
        corpus = corpus_subset(args.files, scratch)
        figures = {"merge": merge_alone(corpus, scratch, workers, args.repeat, args.shard_docs)}
        if not args.skip_build:
            figures["build"] = whole_build(corpus, scratch, workers, args.shard_docs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    run.write(figures)


if __name__ == "__main__":
    main()
