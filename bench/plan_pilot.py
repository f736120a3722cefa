"""How far `run --plan` can be trusted, and how close `--max-cost` runs to its limit, against the scripted fake agent.

1. The plan. A few hundred questions over the bundled 100-article sample, each made to take a different number of
   tool turns (`[fake:calls=N]`, N drawn from a skewed distribution: most trajectories short, a few long, as real
   ones are; each call re-sends the growing conversation, so cost grows faster than N). One real `run --plan
   --pilot P --json` (workers 0) runs the pilot and prints its plan; the same command without --plan runs the rest.
   The fake agent is deterministic, so those trajectories are the population: every other pilot (seeds x pilot
   sizes, drawn with the same seeded sampler the run uses) is replayed from their recorded costs through the same
   estimator (rise_batch.agent.plan_estimate.predict_total). Reported per pilot size: how often the 95% interval
   held the real total of the rest (coverage), the median and p90 relative error of the estimate, the median
   interval width relative to the total; beside it the symmetric t interval, which ignores the skew.
2. The cap. `run --max-cost C --workers 2` (real Ray, 2 actors, concurrency 8) on the first --cap-queries
   questions, for C at a few fractions of their total cost, and max_output_tokens 2000 and 16384 (the worst case a
   call reserves): what the server billed against C, what the run recorded, trajectories cut; then the same command
   with a limit 10x higher finishes, and the totals add up.

    python -m bench.plan_pilot [--queries 300] [--pilots 10,20,40,80] [--seeds 400] [--cap-queries 60]

Writes bench/results/plan_pilot.json and prints the tables. Work files: bench/scratch/plan_pilot/.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from bench.common import REPO, SCRATCH, Run, pct
from rise_batch.agent.plan_estimate import pilot_sample, predict_total, t_interval
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.fake_llm.agent import AgentResponder
from rise_batch.fake_llm.chat import FallbackResponder
from rise_batch.llm.pricing import PriceTable

SAMPLE = REPO / "rise_batch" / "data" / "enwiki_sample.jsonl.gz"
MODEL = "gpt-5.4-mini"


def cli(*argv: str, ok: tuple[int, ...] = (0,), tries: int = 1) -> subprocess.CompletedProcess:
    """The command, asked again up to `tries` times when it fails otherwise (a local Ray that timed out starting on
    a loaded machine: nothing was run, so running again changes no figure)."""
    for _ in range(tries):
        done = subprocess.run([sys.executable, "-m", "rise_batch.cli", *argv], capture_output=True, text=True)
        if done.returncode in ok:
            return done
        print(f"rise-batch {' '.join(argv[:2])} failed ({done.returncode}): {done.stderr[-300:]}", file=sys.stderr)
    sys.exit(f"rise-batch {' '.join(argv[:2])} failed ({done.returncode}):\n{done.stderr[-2000:]}")


def prepare(scratch: Path, n: int, seed: int) -> tuple[Path, Path]:
    """Structured docs (with their index) and `n` questions of skewed length, built once."""
    docs = scratch / "docs"
    if not (docs / "index").is_dir():
        shutil.rmtree(docs, ignore_errors=True)
        cli("structure", "--corpus", str(SAMPLE), "--out", str(docs), "--backend", "heuristic", "--workers", "0",
            "--index", "--no-progress")  # fmt: skip
    import gzip

    rows = [json.loads(line) for line in gzip.open(SAMPLE, "rt")]
    rng = random.Random(seed)
    queries = scratch / f"queries_{n}.jsonl"
    with queries.open("w") as f:
        for i in range(n):
            r = rows[i % len(rows)]
            title = r["text"].split("title: ", 1)[1].split("\n", 1)[0].strip('"')
            calls = min(40, 1 + int(rng.lognormvariate(1.3, 0.8)))  # median ~4 tool turns, a tail to 40
            q = f"What does the article on '{title}' say about it? [fake:calls={calls}]"
            f.write(json.dumps({"query_id": f"q{i:04d}", "query": q, "answer": title,
                                "gold_doc_ids": [r["docid"]]}) + "\n")  # fmt: skip
    return docs, queries


def run_argv(out: Path, docs: Path, queries: Path, base_url: str, *more: str) -> list[str]:
    return ["run", "--queries", str(queries), "--out", str(out), "--docs", str(docs), "--index", str(docs / "index"),
            "--index-backend", "numpy", "--no-progress", "--base-url", base_url, "--model", MODEL,
            "--rpm", "1000000", "--tpm", "10000000000", *more]  # fmt: skip


def costs(out: Path) -> dict[str, float]:
    prices = PriceTable.load()
    got = {}
    for p in (out / "trajectories").glob("*.json"):
        t = json.loads(p.read_text())
        u = t["usage"]
        got[t["query_id"]] = prices.cost(MODEL, u["input_tokens"], u["cached_input_tokens"], u["output_tokens"])
    return got


def billed(server: FakeLLMServer, since: int = 0) -> float:
    prices = PriceTable.load()
    return sum(
        prices.cost(MODEL, e["prompt_tokens"], e["cached_tokens"], e["completion_tokens"])
        for e in server.log(since)
        if e.get("status") == 200 and "prompt_tokens" in e
    )


def coverage(pop: dict[str, float], sizes: list[int], seeds: int) -> list[dict]:
    ids = sorted(pop)
    total = sum(pop.values())
    rows = []
    for n in sizes:
        hit = hit_t = 0
        err, width = [], []
        for s in range(seeds):
            pilot = set(pilot_sample(ids, n, s))
            x = [pop[q] for q in ids if q in pilot]
            rest = total - sum(x)
            m = len(ids) - n
            b, t = predict_total(x, m, seed=s), t_interval(x, m)
            hit += b.low <= rest <= b.high
            hit_t += t.low <= rest <= t.high
            err.append(abs(b.estimate - rest) / rest)
            width.append((b.high - b.low) / rest)
        rows.append({"pilot": n, "remaining": len(ids) - n, "seeds": seeds, "coverage": round(hit / seeds, 3),
                     "coverage_t": round(hit_t / seeds, 3), "error_median": round(statistics.median(err), 3),
                     "error_p90": round(pct(err, 90), 3),
                     "width_median": round(statistics.median(width), 3)})  # fmt: skip
    return rows


def cap_runs(scratch: Path, docs: Path, queries: Path, server: FakeLLMServer, n: int, fractions: list[float]) -> list:
    sub = scratch / f"cap_queries_{n}.jsonl"
    sub.write_text("".join(queries.read_text().splitlines(keepends=True)[:n]))
    free = scratch / "cap_free"
    shutil.rmtree(free, ignore_errors=True)
    mark = len(server.log())
    cli(*run_argv(free, docs, sub, server.base_url, "--workers", "0", "--concurrency", "8"))
    total = billed(server, mark)
    rows = []
    for max_out in (2000, 16384):
        for f in fractions:
            out = scratch / f"cap_{max_out}_{f}"
            shutil.rmtree(out, ignore_errors=True)
            cap = round(total * f, 6)
            base = run_argv(out, docs, sub, server.base_url, "--workers", "2", "--concurrency", "8",
                            "--max-output-tokens", str(max_out))  # fmt: skip
            mark = len(server.log())
            first = cli(*base, "--max-cost", str(cap), ok=(0, 3), tries=3)
            paid = billed(server, mark)
            t = [json.loads(p.read_text()) for p in (out / "trajectories").glob("*.json")]
            cut = sum(x["stop_reason"] == "budget" for x in t)
            mark2 = len(server.log())
            cli(*base, "--max-cost", str(cap * 10 + total), "--json", tries=3)
            done = costs(out)
            rows.append({"max_output_tokens": max_out, "cap_usd": cap, "fraction_of_total": f,
                         "exit": first.returncode, "billed_usd": round(paid, 6),
                         "spent_over_cap": round(paid / cap, 3), "passed": paid > cap + 1e-9,
                         "trajectories_written": len(t), "cut_by_budget": cut,
                         "resumed_total_billed": round(paid + billed(server, mark2), 6),
                         "resumed_trajectories": len(done)})  # fmt: skip
    return [{"total_usd_uncapped": round(total, 6), "queries": n}, *rows]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.plan_pilot", description=__doc__.split("\n")[0])
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--pilot", type=int, default=20, help="the real --plan run's pilot")
    p.add_argument("--pilots", default="10,20,40,80")
    p.add_argument("--seeds", type=int, default=400)
    p.add_argument("--cap-queries", type=int, default=60)
    p.add_argument("--cap-fractions", default="0.25,0.5")
    p.add_argument("--skip-cap", action="store_true")
    p.add_argument("--reuse", action="store_true", help="take the pilot and the population from an earlier run")
    return p


def main() -> None:
    args = build_parser().parse_args()
    bench = Run("plan_pilot", args)
    scratch = SCRATCH / "plan_pilot"
    scratch.mkdir(parents=True, exist_ok=True)
    docs, queries = prepare(scratch, args.queries, 7)
    figures: dict = {}
    with FakeLLMServer(responders=[AgentResponder(), FallbackResponder()]) as server:
        out, kept = scratch / "run", scratch / "run_plan.json"
        if args.reuse and kept.exists():
            plan, pilot_ids = (lambda d: (d["plan"], set(d["pilot_ids"])))(json.loads(kept.read_text()))
        else:
            shutil.rmtree(out, ignore_errors=True)
            base = run_argv(out, docs, queries, server.base_url, "--workers", "0", "--concurrency", "8")
            plan = json.loads(cli(*base, "--plan", "--pilot", str(args.pilot), "--json").stdout.splitlines()[-1])
            pilot_ids = set(costs(out))
            cli(*base)
            kept.write_text(json.dumps({"plan": plan, "pilot_ids": sorted(pilot_ids)}))
        pop = costs(out)
        rest = sum(v for k, v in pop.items() if k not in pilot_ids)
        c = plan["cost_usd"]
        figures["real_plan"] = {"pilot": plan["pilot_queries"], "remaining": plan["remaining_queries"],
                                "estimate": c["estimate"], "low": c["low"], "high": c["high"],
                                "actual_rest_usd": round(rest, 6), "covered": c["low"] <= rest <= c["high"],
                                "error": round((c["estimate"] - rest) / rest, 3),
                                "calls_estimate": plan["model_calls"]["estimate"]}  # fmt: skip
        xs = sorted(pop.values())
        figures["population"] = {"queries": len(xs), "total_usd": round(sum(xs), 6),
                                 "median_usd": round(statistics.median(xs), 6), "p90_usd": round(pct(xs, 90), 6),
                                 "max_usd": round(xs[-1], 6),
                                 "top10pct_share": round(sum(xs[-len(xs) // 10 :]) / sum(xs), 3)}  # fmt: skip
        figures["coverage"] = coverage(pop, [int(x) for x in args.pilots.split(",")], args.seeds)
        bench.write(figures)  # the plan's figures, whatever happens to the cap's runs
        if not args.skip_cap:
            fr = [float(x) for x in args.cap_fractions.split(",")]
            figures["cap"] = cap_runs(scratch, docs, queries, server, args.cap_queries, fr)
    print(json.dumps(figures["population"]))
    print(json.dumps(figures["real_plan"]))
    print(f"{'pilot':>5} {'cover':>6} {'cover_t':>7} {'err_med':>7} {'err_p90':>7} {'width':>6}")
    for r in figures["coverage"]:
        print(f"{r['pilot']:>5} {r['coverage']:>6} {r['coverage_t']:>7} {r['error_median']:>7} {r['error_p90']:>7} "
              f"{r['width_median']:>6}")  # fmt: skip
    for r in figures.get("cap", []):
        print(json.dumps(r))
    bench.write(figures)


if __name__ == "__main__":
    main()
