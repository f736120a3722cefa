"""`rise` with bm25 against `rise` with hybrid on the same queries: gold_R, cov_mean and accuracy per K, against
the fake server's scripted agent (fake_llm/agent.py: it searches with the question's four longest distinctive
words and its key term as two sub-queries, greps the key term with rg, reads the head of the best-ranked previewed
file that matches and then the TOC section holding the hit, and answers with the sentence naming the term; the
fake grader checks that answer against the gold answers).

Two sets: `demo`, the bundled 100-article sample with jobs/queries_demo.jsonl (8 questions, most with a quoted
phrase), and `squad`, a wiki2015 slice (../shared/data, beside the checkout): two test-half squad_wiki questions
per article (the split of bench.retrievers), their 24 gold articles and the first other articles up to
--slice-docs. Each set is structured (heuristic TOCs) and indexed with both parts (`index --retriever hybrid`)
once into bench/scratch/agent_retrievers/SET; then for every K, `run` (bm25, then hybrid), `judge`, and one
`report` over all the runs, all through the real CLI.

    python -m bench.agent_retrievers --set demo --k 1000,10,3,1
    python -m bench.agent_retrievers --set squad --k 100,10,3

Writes bench/results/agent_retrievers_SET.json and prints the table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from bench.common import REPO, SCRATCH, WIKI, Run
from bench.common import SQUAD as SQUAD_DIR
from bench.retrievers import half

SAMPLE = REPO / "rise_batch" / "data" / "enwiki_sample.jsonl.gz"
RETRIEVERS = ("bm25", "hybrid")


def cli(*argv: str) -> None:
    done = subprocess.run([sys.executable, "-m", "rise_batch.cli", *argv], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"rise-batch {' '.join(argv[:2])} failed ({done.returncode}):\n{done.stderr[-2000:]}")


def squad_slice(out: Path, per_article: int, n_docs: int) -> tuple[Path, Path]:
    """The slice's corpus (Parquet) and questions (JSONL): gold articles first found, then other articles."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    by: dict[str, list[dict]] = defaultdict(list)
    for line in (SQUAD_DIR / "queries.jsonl").read_text().splitlines():
        row = json.loads(line)
        if half(row["query_id"]) == "test":
            by[row["gold_doc_ids"][0]].append(row)
    queries = [r for g in sorted(by) for r in by[g][:per_article]]
    gold = {r["gold_doc_ids"][0] for r in queries}
    rows: list[dict] = []
    others = 0
    for part in sorted(WIKI.glob("part-*.parquet")):
        for r in pq.read_table(part).to_pylist():
            if r["docid"] in gold or others < n_docs - len(gold):
                others += r["docid"] not in gold
                rows.append(r)
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), out / "corpus.parquet")
    (out / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries))
    return out / "corpus.parquet", out / "queries.jsonl"


def prepare(args: argparse.Namespace, scratch: Path) -> tuple[Path, Path, Path]:
    """(queries, structured docs, hybrid index), built once."""
    if args.set == "demo":
        corpus, queries = SAMPLE, REPO / "jobs" / "queries_demo.jsonl"
    else:
        corpus, queries = squad_slice(scratch, args.per_article, args.slice_docs)
    docs, index = scratch / "struct", scratch / "index"
    if not (index / "dense").is_dir():
        shutil.rmtree(docs, ignore_errors=True)
        shutil.rmtree(index, ignore_errors=True)
        print(f"structuring and indexing {corpus} into {scratch}", flush=True)
        cli("structure", "--corpus", str(corpus), "--out", str(docs), "--backend", "heuristic", "--workers", "1")
        cli("index", "--corpus", str(corpus), "--out", str(index), "--retriever", "hybrid", "--workers", "1")
    return queries, docs, index


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.agent_retrievers", description=__doc__.split("\n")[0])
    ap.add_argument("--set", choices=("demo", "squad"), default="demo")
    ap.add_argument("--k", default="1000,10,3,1", help="documents linked per sub-query, comma-separated")
    ap.add_argument("--per-article", type=int, default=2, help="squad: test-half questions per article")
    ap.add_argument("--slice-docs", type=int, default=1000, help="squad: documents in the slice")
    ap.add_argument("--scratch", type=Path, default=None, help="default bench/scratch/agent_retrievers/SET")
    args = ap.parse_args(argv)
    run = Run(f"agent_retrievers_{args.set}", args)
    scratch = args.scratch or SCRATCH / "agent_retrievers" / args.set
    queries, docs, index = prepare(args, scratch)
    from rise_batch.fake_llm import FakeLLMServer

    dirs = []
    with FakeLLMServer() as server:  # the scripted agent and the grader, over HTTP
        for k in [int(x) for x in args.k.split(",")]:
            for retriever in RETRIEVERS:
                out = scratch / "runs" / f"{retriever}-k{k}"
                shutil.rmtree(out, ignore_errors=True)
                cli(
                    *("run", "--queries", str(queries), "--system", "rise", "--docs", str(docs), "--index", str(index)),
                    *("--out", str(out), "--k", str(k), "--retriever", retriever, "--base-url", server.base_url),
                    *("--workers", "0", "--concurrency", "2", "--index-backend", "numpy"),
                    *("--rpm", "1000000", "--tpm", "100000000"),
                )
                cli("judge", str(out), "--model", "gpt-5.4-mini", "--base-url", server.base_url)
                dirs.append(str(out))
                print(f"  ran {retriever} K={k}", flush=True)
    cli("report", *dirs, "--out", str(scratch / "report"))
    report = json.loads((scratch / "report" / "report.json").read_text())
    rows = [
        {key: r.get(key) for key in ("retriever", "k", "n_queries", "gold_R", "cov_mean", "accuracy", "n_correct")}
        for r in report["runs"]
    ]
    print(f"\n{args.set}: {rows[0]['n_queries']} questions\n| K | retriever | gold_R | cov_mean | accuracy |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['k']} | {r['retriever']} | {r['gold_R']:.3f} | {r['cov_mean']:.3f} | {r['accuracy']:.3f} |")
    run.write({"set": args.set, "runs": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
