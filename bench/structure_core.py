"""Benchmark of the pure structuring core on real articles, single process.

Measures, side by side on one corpus (default ../shared/data/wiki2015, 26,887 Wikipedia articles, 15 kB mean):
  - validate+render with the heuristic's own (verbatim) anchors,
  - validate+render with LLM-like anchors sampled from the documents: 8-12 words from a body line, a third of
    them re-spaced (normalised tier), a tenth with a paraphrased tail (prefix tiers), a few absent or repeated,
  - the heuristic backend end to end (propose + validate + render + checkpoint row),
and the heuristic's coverage (share of documents over 1,500 characters with >= 2 sections) and anchor located
rate. Texts are loaded into memory first, so only the core is timed. Targets: validate+render >= 2,000 docs/s,
heuristic >= 500 docs/s. `--baseline FILE` times an older heuristic.py the same way in the same run (e.g. the
last commit's, from `git show HEAD:rise_batch/structure/heuristic.py > /tmp/old.py`) and compares what readers
see: TOC entries without a description, and titles that are comma lists of words ("Overview: Kong, Hong, Chau").

    python -m bench.structure_core [--corpus PATH] [--limit N] [--repeat 3] [--out bench/results/structure_core.json]
        [--baseline OLD_HEURISTIC.py]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import statistics
import sys
import time
from collections import Counter

from bench.common import WIKI, Run
from rise_batch.corpus.readers import iter_docs
from rise_batch.structure.anchors import LOCATED, body_start_line, validate_anchors
from rise_batch.structure.backends import HeuristicBackend, evaluate, finish
from rise_batch.structure.heuristic import propose_heuristic
from rise_batch.structure.render import render
from rise_batch.types import Doc, Section

TARGET_VALIDATE_RENDER = 2000.0
TARGET_HEURISTIC = 500.0
KEYWORD_TITLE = re.compile(r"^(?:[^:;]+: )?[^\W\d_][\w'’.-]*(?:, [^\W\d_][\w'’.-]*)+$")


def load_heuristic(path: str):
    """An older heuristic.py as its own module, beside the current one (it imports only stable helpers)."""
    spec = importlib.util.spec_from_file_location("baseline_heuristic", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    return mod


def readability(rows) -> dict:
    """What a reader of the TOC meets: documents with an entry lacking a description or titled by a keyword list."""
    toc = [json.loads(r.sections_json) for r in rows if r.outcome == "toc"]
    no_desc = sum(any(not d.strip() for _, d, _ in secs) for secs in toc)
    keyword = sum(any(KEYWORD_TITLE.match(t) for t, _, _ in secs) for secs in toc)
    return {
        "docs_with_toc": len(toc),
        "docs_with_entry_lacking_description": no_desc,
        "share_lacking_description": round(no_desc / len(toc), 6) if toc else 0,
        "docs_with_keyword_list_title": keyword,
        "share_keyword_list_title": round(keyword / len(toc), 4) if toc else 0,
    }


def sampled_anchors(text: str, rng: random.Random) -> list[str]:
    """LLM-like anchors: in document order, mostly verbatim, some re-spaced, paraphrased, absent or repeated."""
    lines = text.split("\n")
    starts = [i for i in range(body_start_line(text), len(lines)) if len(lines[i].split()) >= 8]
    if not starts:
        return []
    picked = sorted(rng.sample(starts, min(len(starts), max(2, len(text) // 2500))))
    out: list[str] = []
    for i in picked:
        spans = list(re.finditer(r"\S+", lines[i]))[: rng.randint(8, 12)]
        anchor = lines[i][spans[0].start() : spans[-1].end()]
        r = rng.random()
        if r < 0.33:
            anchor = "  ".join(m.group() for m in spans)  # re-spaced
        elif r < 0.43:
            anchor = " ".join([m.group() for m in spans[:7]] + ["paraphrased", "ending", "here"])
        elif r < 0.46:
            anchor = "a sentence the model made up entirely"
        out.append(anchor)
    if len(out) > 2 and rng.random() < 0.1:
        out.append(out[0])  # a repeated proposal (duplicate / out of order)
    return out


def validate_and_render(text: str, anchors: list[str]) -> tuple[str, Counter]:
    outs = validate_anchors(text, anchors)
    sections = [Section(f"S{k}", "description", o.line) for k, o in enumerate(outs) if o.status in LOCATED]
    return render(text, sections), Counter(o.status for o in outs)


def best_of(repeat: int, fn):
    """Run fn() `repeat` times; (best wall s, best cpu s, last result). Best-of-N filters out the time other
    processes on a shared machine steal; the cpu figure is the process's own CPU time."""
    walls, cpus = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        res = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return min(walls), min(cpus), res


def timed_validate_render(docs: list[Doc], anchor_sets: list[list[str]]) -> tuple[float, float, Counter]:
    statuses: Counter = Counter()
    t0, c0 = time.perf_counter(), time.process_time()
    for doc, anchors in zip(docs, anchor_sets, strict=True):
        statuses.update(validate_and_render(doc.text, anchors)[1])
    return time.perf_counter() - t0, time.process_time() - c0, statuses


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m bench.structure_core", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus", default=str(WIKI))
    ap.add_argument("--limit", type=int, default=0, help="first N documents (0 = all)")
    ap.add_argument("--out", help="the results file (default bench/results/structure_core.json)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per measure; the best is reported")
    ap.add_argument("--baseline", default="", help="an older heuristic.py to time and compare beside the current")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run = Run("structure_core", args)

    t0 = time.perf_counter()
    docs: list[Doc] = []
    for doc in iter_docs(args.corpus):
        docs.append(doc)
        if args.limit and len(docs) >= args.limit:
            break
    load_s = time.perf_counter() - t0
    n = len(docs)
    chars = [len(d.text) for d in docs]

    # Heuristic end to end (also yields the anchors for the first validate+render run).
    backend = HeuristicBackend()
    heur_s, heur_cpu, rows = best_of(args.repeat, lambda: [backend.structure_sync(d, "bench")[0] for d in docs])
    proposals = [propose_heuristic(d.text) for d in docs]
    baseline = None
    if args.baseline:
        old = load_heuristic(args.baseline)

        def old_backend(d: Doc):  # HeuristicBackend.structure_sync with the older proposer
            return finish(d, "bench", evaluate(d.text, old.propose_heuristic(d.text), "too-short"), "heuristic")[0]

        b_s, b_cpu, b_rows = best_of(args.repeat, lambda: [old_backend(d) for d in docs])
        baseline = {
            "file": args.baseline,
            "seconds": round(b_s, 3),
            "docs_per_s": round(n / b_s, 1),
            "docs_per_cpu_s": round(n / b_cpu, 1),
            **readability(b_rows),
        }
    heur_anchors = [[s.anchor for s in p.sections] for p in proposals]

    vr_heur_s, vr_heur_cpu, (_, _, heur_status) = best_of(
        args.repeat, lambda: timed_validate_render(docs, heur_anchors)
    )
    rng = random.Random(args.seed)
    llm_like = [sampled_anchors(d.text, rng) for d in docs]
    vr_llm_s, vr_llm_cpu, (_, _, llm_status) = best_of(args.repeat, lambda: timed_validate_render(docs, llm_like))

    long_idx = [i for i, c in enumerate(chars) if c >= 1500]
    n_sections = [len(json.loads(r.sections_json)) for r in rows]
    covered = sum(1 for i in long_idx if n_sections[i] >= 2)
    proposed = sum(r.anchors_proposed for r in rows)
    located = sum(r.anchors_exact + r.anchors_normalized + r.anchors_prefix for r in rows)
    llm_total = sum(llm_status.values())
    result = {
        "corpus": args.corpus,
        "docs": n,
        "mean_chars": round(statistics.mean(chars), 1) if chars else 0,
        "load_seconds": round(load_s, 2),
        "repeat": args.repeat,
        "validate_render_heuristic_anchors": {
            "seconds": round(vr_heur_s, 3),
            "docs_per_s": round(n / vr_heur_s, 1),
            "docs_per_cpu_s": round(n / vr_heur_cpu, 1),
            "anchors": sum(heur_status.values()),
        },
        "validate_render_llm_like_anchors": {
            "seconds": round(vr_llm_s, 3),
            "docs_per_s": round(n / vr_llm_s, 1),
            "docs_per_cpu_s": round(n / vr_llm_cpu, 1),
            "anchors": llm_total,
            "statuses": dict(llm_status),
            "located_rate": round(sum(llm_status[s] for s in LOCATED) / llm_total, 4) if llm_total else 0,
        },
        "heuristic_backend": {
            "seconds": round(heur_s, 3),
            "docs_per_s": round(n / heur_s, 1),
            "docs_per_cpu_s": round(n / heur_cpu, 1),
            "outcomes": dict(Counter(r.outcome for r in rows)),
            "docs_over_1500_chars": len(long_idx),
            "coverage_ge2_sections_over_1500": round(covered / len(long_idx), 4) if long_idx else 0,
            "anchors_proposed": proposed,
            "anchors_located": located,
            "anchor_located_rate": round(located / proposed, 4) if proposed else 0,
            "mean_sections_per_toc_doc": round(statistics.mean([k for k in n_sections if k]), 2),
            "mean_words_per_section": round(
                sum(len(docs[i].text.split()) for i in range(n) if n_sections[i]) / max(1, sum(n_sections)), 1
            ),
            **readability(rows),
        },
        "baseline_heuristic_backend": baseline,
        "targets": {"validate_render_docs_per_s": TARGET_VALIDATE_RENDER, "heuristic_docs_per_s": TARGET_HEURISTIC},
    }
    vr = result["validate_render_heuristic_anchors"]
    vl = result["validate_render_llm_like_anchors"]
    hb = result["heuristic_backend"]
    print(
        f"structure core on {n:,} docs (mean {result['mean_chars']:,.0f} chars), single process, best of {args.repeat}"
    )
    print(f"{'measure':<40}{'docs/s wall':>12}{'docs/s cpu':>12}{'target':>9}  ok")
    for name, d, target in (
        ("validate+render (heuristic anchors)", vr, TARGET_VALIDATE_RENDER),
        ("validate+render (LLM-like anchors)", vl, TARGET_VALIDATE_RENDER),
        ("heuristic backend end to end", hb, TARGET_HEURISTIC),
    ):
        ok = "yes" if d["docs_per_s"] >= target else "NO"
        print(f"{name:<40}{d['docs_per_s']:>12,.0f}{d['docs_per_cpu_s']:>12,.0f}{target:>9,.0f}  {ok}")
    print(f"heuristic coverage (>=2 sections, docs >=1500 chars): {hb['coverage_ge2_sections_over_1500']:.2%}")
    print(f"heuristic anchors located: {hb['anchor_located_rate']:.2%} of {proposed:,}; outcomes {hb['outcomes']}")
    print(f"LLM-like anchors located: {vl['located_rate']:.2%} {dict(llm_status)}")
    print(f"sections per TOC doc: {hb['mean_sections_per_toc_doc']}, words per section: {hb['mean_words_per_section']}")
    for name, d in (("current", hb), ("baseline", baseline)):
        if d:
            print(
                f"{name:<9} heuristic {d['docs_per_s']:>7,.0f} docs/s wall {d['docs_per_cpu_s']:>7,.0f} docs/cpu-s; "
                f"docs with an entry lacking a description {d['docs_with_entry_lacking_description']:,} "
                f"({d['share_lacking_description']:.3%}), with a keyword-list title "
                f"{d['docs_with_keyword_list_title']:,} ({d['share_keyword_list_title']:.2%})"
            )
    print(f"load average at end: {os.getloadavg()} (other processes share the cores: see the cpu column)")
    run.write(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
