"""How far `run --plan` can be trusted, and how close `--max-cost` runs to its limit, against the scripted fake agent.

1. The plan. A few hundred questions over the bundled 100-article sample, each made to take a different number of
   tool turns (`[fake:calls=N]`, N drawn from a skewed distribution: most trajectories short, a few long, as real
   ones are; each call re-sends the growing conversation, so cost grows faster than N). One real `run --plan
   --pilot P --json` (workers 0) runs the pilot and prints its plan; the same command without --plan runs the rest.
   The fake agent is deterministic, so those trajectories are the population: every other pilot (seeds x pilot
   sizes, drawn with the same seeded sampler the run uses) is replayed from their recorded costs through the same
   estimator (rise_batch.agent.plan_estimate.predict_total). Reported per pilot size: how often the 95% interval
   held the real total of the rest (coverage), how often it missed low and high, the median and p90 relative error
   of the estimate, the median interval width relative to the total; beside it the symmetric t interval, which
   ignores the skew. The estimator is a bootstrap-t on the log of rest mean / pilot mean, and the default --pilot
   (50) is a size where its coverage is at least 90% here: both, since no estimator sees a tail its pilot missed.
   A sweep whose cells share queries: the same questions run again as more cells (--cells SYSTEM:K, each a full
   run), every pilot drawing the same queries in every cell as `sweep --plan` does; its total's interval resamples
   queries paired across the cells (agent/plan_estimate.py `paired_total`, what `sweep --plan` prints) beside the
   cells' intervals added as if independent (their arms in quadrature, the total before).
2. The cap. `run --max-cost C --workers 2` (real Ray, 2 actors, concurrency 8) on the first --cap-queries
   questions, for C at a few fractions of their total cost, and max_output_tokens 2000 and 16384 (the worst case a
   call reserves): what the server billed against C, what the run recorded, trajectories cut; then the same command
   with a limit 10x higher finishes, and the totals add up.

    python -m bench.plan_pilot [--queries 300] [--pilots 5,10,20,40,50,80] [--seeds 400] [--cap-queries 60]

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
from rise_batch.agent.plan_estimate import paired_total, pilot_sample, predict_total, t_interval
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


def tally(rows: dict[str, list], key: str, got: tuple[float | None, float | None], rest: float) -> None:
    """One pilot's interval `got` (low, high) against the real total of the rest, under `key`."""
    low, high = got
    r = rows.setdefault(key, [0, 0, 0, []])  # below, above, no interval, widths
    if low is None or high is None:
        r[2] += 1
        return
    r[0] += rest < low
    r[1] += rest > high
    r[3].append((high - low) / rest)


def summary(n: int, m: int, seeds: int, rows: dict[str, list], err: list[float]) -> dict:
    out = {"pilot": n, "remaining": m, "seeds": seeds}
    for key, (below, above, none, widths) in rows.items():
        width = round(statistics.median(widths), 3) if widths else None
        out[key] = {"coverage": round(1 - (below + above + none) / seeds, 3), "below": below, "above": above,
                    "no_interval": none, "width_median": width}  # fmt: skip
    if err:
        out["error_median"], out["error_p90"] = round(statistics.median(err), 3), round(pct(err, 90), 3)
    return out


def coverage(pop: dict[str, float], sizes: list[int], seeds: int) -> list[dict]:
    """A run: every seed's pilot of each size through the plan's estimator and the symmetric t interval."""
    ids = sorted(pop)
    total = sum(pop.values())
    out = []
    for n in sizes:
        rows: dict[str, list] = {}
        err = []
        for s in range(seeds):
            pilot = set(pilot_sample(ids, n, s))
            x = [pop[q] for q in ids if q in pilot]
            rest, m = total - sum(x), len(ids) - n
            b, t = predict_total(x, m, seed=s), t_interval(x, m)
            tally(rows, "plan", (b.low, b.high), rest)
            tally(rows, "t", (t.low, t.high), rest)
            err.append(abs(b.estimate - rest) / rest)
        out.append(summary(n, len(ids) - n, seeds, rows, err))
    return out


def sweep_coverage(pops: list[dict[str, float]], sizes: list[int], seeds: int) -> list[dict]:
    """A sweep whose cells share the queries: the paired total beside the cells' intervals added as independent."""
    ids = sorted(set.intersection(*(set(p) for p in pops)))
    totals = [sum(p[q] for q in ids) for p in pops]
    out = []
    for n in sizes:
        rows: dict[str, list] = {}
        err = []
        for s in range(seeds):
            pilot = pilot_sample(ids, n, s)  # every cell draws the same pilot, as `sweep --plan` does
            m = len(ids) - n
            rest = sum(totals) - sum(p[q] for p in pops for q in pilot)
            paired = paired_total([([sum(p[q] for p in pops) for q in pilot], m)], seed=s)
            cells = [predict_total([p[q] for q in pilot], m, seed=s) for p in pops]
            est = sum(c.estimate for c in cells)
            if all(c.low is not None for c in cells):
                up = sum((c.high - c.estimate) ** 2 for c in cells) ** 0.5
                down = sum((c.estimate - c.low) ** 2 for c in cells) ** 0.5
                tally(rows, "independent", (max(est - down, 0.0), est + up), rest)
            else:
                tally(rows, "independent", (None, None), rest)
            tally(rows, "paired", (paired.low, paired.high), rest)
            err.append(abs(paired.estimate - rest) / rest)
        out.append(summary(n, len(ids) - n, seeds, rows, err) | {"cells": len(pops)})
    return out


def cell_runs(scratch: Path, docs: Path, queries: Path, base_url: str, cells: list[str]) -> list[dict[str, float]]:
    """Each further cell (SYSTEM:K) run in full over the same questions (a resume when its directory is done)."""
    pops = []
    for spec in cells:
        system, k = spec.split(":")
        out = scratch / f"cell_{system}_k{k}"
        cli(*run_argv(out, docs, queries, base_url, "--workers", "0", "--concurrency", "8", "--system", system,
                      "--k", k))  # fmt: skip
        pops.append(costs(out))
    return pops


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
    p.add_argument("--pilot", type=int, default=50, help="the real --plan run's pilot")
    p.add_argument("--pilots", default="5,10,20,40,50,80")
    p.add_argument("--cells", default="rise:5,rise-bm25:1000,rise-bm25:5",
                   help="the sweep's further cells (SYSTEM:K) beside the run's (rise, K 1000)")  # fmt: skip
    p.add_argument("--seeds", type=int, default=400)
    p.add_argument("--cap-queries", type=int, default=60)
    p.add_argument("--cap-fractions", default="0.25,0.5")
    p.add_argument("--skip-cap", action="store_true")
    p.add_argument("--reuse", action="store_true", help="take the pilot and the population from an earlier run")
    return p


def print_coverage(title: str, rows: list[dict], keys: tuple[str, str]) -> None:
    """Coverage of the 95% interval by pilot size (misses below / above), the width, the estimate's error."""
    print(f"{title}: coverage of the 95% interval [misses below/above], median width / total")
    print(f"{'pilot':>5} {'left':>5} " + " ".join(f"{k:>22}" for k in keys) + f" {'err_med':>7} {'err_p90':>7}")
    for r in rows:
        cols = []
        for k in keys:
            c = r[k]
            cols.append(f"{c['coverage']:.1%} [{c['below']}/{c['above']}] {c['width_median'] or 0:.2f}")
        print(f"{r['pilot']:>5} {r['remaining']:>5} " + " ".join(f"{x:>22}" for x in cols)
              + f" {r['error_median']:>7} {r['error_p90']:>7}")  # fmt: skip


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
            line = cli(*base).stdout.strip().splitlines()[-1]  # the run's `planned $X [low, high], spent $Y`
            kept.write_text(json.dumps({"plan": plan, "pilot_ids": sorted(pilot_ids), "planned_line": line}))
        planned_line = json.loads(kept.read_text()).get("planned_line")
        pop = costs(out)
        rest = sum(v for k, v in pop.items() if k not in pilot_ids)
        c = plan["cost_usd"]
        figures["real_plan"] = {"pilot": plan["pilot_queries"], "remaining": plan["remaining_queries"],
                                "estimate": c["estimate"], "low": c["low"], "high": c["high"],
                                "actual_rest_usd": round(rest, 6), "covered": c["low"] <= rest <= c["high"],
                                "error": round((c["estimate"] - rest) / rest, 3),
                                "calls_estimate": plan["model_calls"]["estimate"],
                                "planned_line": planned_line}  # fmt: skip
        xs = sorted(pop.values())
        figures["population"] = {"queries": len(xs), "total_usd": round(sum(xs), 6),
                                 "median_usd": round(statistics.median(xs), 6), "p90_usd": round(pct(xs, 90), 6),
                                 "max_usd": round(xs[-1], 6),
                                 "top10pct_share": round(sum(xs[-len(xs) // 10 :]) / sum(xs), 3)}  # fmt: skip
        sizes = [int(x) for x in args.pilots.split(",")]
        figures["coverage"] = coverage(pop, sizes, args.seeds)
        bench.write(figures)  # the plan's figures, whatever happens to the cap's runs
        if args.cells:
            more = cell_runs(scratch, docs, queries, server.base_url, args.cells.split(","))
            figures["sweep_coverage"] = sweep_coverage([pop, *more], sizes, args.seeds)
            bench.write(figures)
        if not args.skip_cap:
            fr = [float(x) for x in args.cap_fractions.split(",")]
            figures["cap"] = cap_runs(scratch, docs, queries, server, args.cap_queries, fr)
    print(json.dumps(figures["population"]))
    print(json.dumps(figures["real_plan"]))
    if planned_line := figures["real_plan"].get("planned_line"):
        print(planned_line)
    print_coverage("run", figures["coverage"], ("plan", "t"))
    if "sweep_coverage" in figures:
        print_coverage(f"sweep of {figures['sweep_coverage'][0]['cells']} cells sharing the queries",
                       figures["sweep_coverage"], ("paired", "independent"))  # fmt: skip
    for r in figures.get("cap", []):
        print(json.dumps(r))
    bench.write(figures)


if __name__ == "__main__":
    main()
