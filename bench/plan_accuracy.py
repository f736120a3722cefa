"""How good is `rise-batch plan`? Estimate, then structure the whole corpus through the Batch API path on the fake
server and compare with the tokens the server counted; then price the 1M-document run both ways.

Corpus: wiki2015 (../shared/data/wiki2015, 26,887 Wikipedia articles, 15.2k chars mean) stands in for
BrowseComp-Plus, whose documents are not available here; the 1M projection scales its sample to 1,000,000 docs.
With the `tokens` extra installed, the fake server bills real o200k_base tokens (the request body as sent, JSON
schema included) and the plan counts its sample with the same encoding, so the figures measure the plan's
*sampling* and *output model* error against a real tokenizer's bill (without the extra both fall back to chars/4,
and the result file says so in `token_count`).

Each seed's sample is weighted two ways, the plan's regression on text bytes and simple scaling, side by side.
The output model was fitted on the fake server's replies (deterministic proposals, see fake_llm/structuring.py), not
a real model's: its error here says how well it fits this server, not what a real model will write.

    python -m bench.plan_accuracy [--corpus PATH] [--samples 250 1000 4000] [--seeds 3] [--limit N] [--reuse-truth]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import RESULTS, WIKI, Run, read_result
from rise_batch.config import load_structure_config
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.structuring.job import run_structure
from rise_batch.structuring.plan import format_plan, make_plan

MODEL = "gpt-5.4-nano"
# Online limits the 1M projection is priced at: the CLI defaults, and a high-tier account (an assumption: check the
# limits page of your own organisation).
# Weighting of the sample (structuring/plan_sample.py): calibrated on the footers' text bytes (the plan's default)
# against simple scaling by rows/n (the plan before issue 15), compared on the same samples.
ESTIMATORS = {"regression": True, "simple": False}
LIMITS = {"cli-default": (500, 2_000_000), "high-tier": (30_000, 180_000_000)}


def structure_on_fake(corpus: Path, limit: int | None) -> dict:
    os.environ.setdefault("OPENAI_API_KEY", "")
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer() as server:
        cfg = load_structure_config(
            None,
            corpus=str(corpus),
            out=str(Path(tmp) / "out"),
            backend="llm",
            mode="batch",
            limit=limit,
            progress=False,
            llm_base_url=server.base_url,
            batch_poll_s=0.05,
        )
        t0 = time.monotonic()
        stats = run_structure(cfg)
        wall = time.monotonic() - t0
        counted = server.stats()
        batches = server.batch_api.stats()
    from rise_batch.llm.pricing import PriceTable

    # The fake server caches any repeated system prompt; OpenAI caches only prefixes of >= 1024 tokens, and this
    # prompt is ~620, so the plan prices no cached tokens. Its dollars are compared with the counted tokens priced
    # the same way; what the fake billed (with its cache) is reported too.
    no_cache = PriceTable.load().cost(MODEL, counted["prompt_tokens"], 0, counted["completion_tokens"], batch=True)
    return {
        "usd_batch_no_cache": no_cache,
        "docs": stats["docs_total"],
        "requests": counted["requests"],
        "prompt_tokens": counted["prompt_tokens"],
        "completion_tokens": counted["completion_tokens"],
        "cost_usd_batch_as_billed_by_fake": stats["cost_usd"],
        "docs_with_toc": stats["docs_with_toc"],
        "batches_created": batches["batches_created"],
        "checkpoint": {k: stats[k] for k in ("input_tokens", "cached_input_tokens", "output_tokens", "llm_calls")},
        "transport": stats.get("transport", {}),
        "wall_seconds": round(wall, 1),
    }


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m bench.plan_accuracy", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus", type=Path, default=WIKI)
    ap.add_argument("--samples", type=int, nargs="+", default=[250, 1000, 4000])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--limit", type=int, help="structure only the first N docs (then plans sample those only)")
    ap.add_argument("--out", type=Path, default=RESULTS / "plan_accuracy.json")
    ap.add_argument("--reuse-truth", action="store_true", help="take the fake server's counts from --out's last run")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    run = Run("plan_accuracy", args)
    corpus = args.corpus
    if args.limit:  # plan and run must see the same documents
        import pyarrow as pa
        import pyarrow.parquet as pq

        from rise_batch.corpus.readers import iter_docs

        docs = [d for _, d in zip(range(args.limit), iter_docs(corpus), strict=False)]
        corpus = Path(tempfile.mkdtemp()) / "subset.parquet"
        pq.write_table(pa.table({"docid": [d.docid for d in docs], "text": [d.text for d in docs]}), corpus)

    previous = (read_result(args.out) or {}).get("figures", {}) if args.reuse_truth else {}
    if previous.get("corpus") == str(args.corpus) and previous.get("limit") == args.limit:
        truth = previous["truth"]  # the fake server's counts do not change with the plan's sampling
    else:
        truth = structure_on_fake(corpus, None)
    print(f"fake server counted over {truth['docs']:,} docs ({truth['wall_seconds']} s, batch path): "
          f"{truth['prompt_tokens']:,} prompt + {truth['completion_tokens']:,} completion tokens")  # fmt: skip

    runs = []
    for n in args.samples:
        for seed in range(args.seeds):
            for estimator, calibrate in ESTIMATORS.items():  # the same sample, weighted both ways
                t0 = time.monotonic()
                p = make_plan(corpus, MODEL, sample=n, seed=seed, calibrate=calibrate)
                runs.append(
                    {
                        "sample": n,
                        "seed": seed,
                        "estimator": estimator,
                        "sampling": p["sampling"],
                        "plan_seconds": round(time.monotonic() - t0, 2),
                        "input_error": p["input_tokens"] / truth["prompt_tokens"] - 1,
                        "output_error": p["output_tokens"] / truth["completion_tokens"] - 1,
                        "cost_error": p["usd_batch"] / truth["usd_batch_no_cache"] - 1,
                    }
                )
    summary: dict = {}
    for n in args.samples:
        for estimator in ESTIMATORS:
            rows = [r for r in runs if r["sample"] == n and r["estimator"] == estimator]
            s = summary.setdefault(n, {})[estimator] = {
                k: {"mean_abs": statistics.fmean(abs(r[k]) for r in rows), "max_abs": max(abs(r[k]) for r in rows)}
                for k in ("input_error", "output_error", "cost_error")
            }
            cells = "  ".join(f"{k[:-6]} {s[k]['mean_abs']:.1%}/{s[k]['max_abs']:.1%}" for k in s)
            print(f"sample {n:>5} {estimator:>10}: |error| mean/max over {args.seeds} seeds: {cells}")

    projection = {}
    for name, (rpm, tpm) in LIMITS.items():
        projection[name] = make_plan(corpus, MODEL, sample=1000, n_docs=1_000_000, rpm=rpm, tpm=tpm)
    print(format_plan(projection["cli-default"], "online"))
    from rise_batch.llm.pricing import PriceTable

    per_doc = 1_000_000 / truth["docs"]  # the fake server's own counts, scaled: what the plan should have said
    counted_1m = {
        "input_tokens": round(truth["prompt_tokens"] * per_doc),
        "output_tokens": round(truth["completion_tokens"] * per_doc),
    }
    for mode, batch in (("usd_online", False), ("usd_batch", True)):
        counted_1m[mode] = PriceTable.load().cost(
            MODEL, counted_1m["input_tokens"], 0, counted_1m["output_tokens"], batch=batch
        )
    print(f"1M docs from the fake server's counts on wiki2015, scaled: online ${counted_1m['usd_online']:,.0f}, "
          f"batch ${counted_1m['usd_batch']:,.0f}")  # fmt: skip
    hi = projection["high-tier"]
    print(f"1M docs with {MODEL}: online ${hi['usd_online']:,.0f}, batch ${hi['usd_batch']:,.0f}; online hours "
          f"{projection['cli-default']['hours_online']:,.1f} at 500 rpm / 2M tpm, {hi['hours_online']:,.2f} at "
          f"30k rpm / 180M tpm")  # fmt: skip
    result = {
        "corpus": str(args.corpus),
        "corpus_note": "wiki2015 stands in for BrowseComp-Plus (not available here); 1M = its sample scaled",
        "limit": args.limit,
        "model": MODEL,
        "token_count": projection["cli-default"]["token_count"],
        "truth": truth,
        "runs": runs,
        "summary": summary,
        "projection_1m": {
            name: {
                k: p[k]
                for k in (
                    "requests",
                    "input_tokens",
                    "output_tokens",
                    "usd_online",
                    "usd_batch",
                    "usd_per_doc_online",
                    "usd_per_doc_batch",
                    "hours_online",
                    "rpm",
                    "tpm",
                    "batch_files",
                    "llm_share",
                )
            }  # fmt: skip
            for name, p in projection.items()
        },
        "counted_scaled_1m": counted_1m,
    }
    run.write(result, args.out)


if __name__ == "__main__":
    main()
