"""`rise-batch demo`: the embedded default job, end to end, with no API key and no data to bring.

It is also the smoke test a new user runs first, so it prints where every output went and what the numbers mean,
and it must finish on a fresh laptop: where bubblewrap cannot run, the parts that need a shell are skipped (one line
says so and how to enable them) and the agent part uses the retrieval agent, which has no shell. It never falls
back to an unsandboxed shell: workspace files are hardlinks into the corpus.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from rise_batch.option_paths import local
from rise_batch.options import Layout, Section, add_layout, option

ENABLE_BWRAP = "sudo apt-get install bubblewrap"


@dataclass(frozen=True)
class DemoOptions:
    """`demo`'s settings (its flags)."""

    out: str = option(
        "demo_out",
        path=local("the demo ends with a workspace of hardlinks into its corpus"),
        help="output directory",
        shown="./demo_out",
    )
    query: str = option("anarchist philosophy Proudhon", help="sample search query")


DEMO_OPTIONS = Layout(DemoOptions, (Section(None, ("out", "query")),), from_file=False)


def sample_corpus() -> Path:
    """The 100 Wikipedia articles shipped with the package (CC BY-SA; see rise_batch/data/ATTRIBUTION.md)."""
    return Path(__file__).resolve().parent.parent / "data" / "enwiki_sample.jsonl.gz"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="structure the bundled 100-article sample corpus (no API key needed)",
        description=(
            "Run the main job on the bundled sample: heuristic TOC structuring of 100 Wikipedia articles, "
            "a BM25 index, a sample search into a workspace and a sandboxed rg in it, then three scripted agent "
            "trajectories against a built-in fake model (their dollar figures are simulated). Without bubblewrap "
            f"the shell parts are skipped ({ENABLE_BWRAP} enables them). Safe to re-run (it resumes)."
        ),
    )
    add_layout(p, DEMO_OPTIONS)
    p.set_defaults(func=run)


def sandbox_skip_line(reason: str) -> str:
    """The one line saying what a machine without a working bubblewrap misses, and the command that enables it."""
    what = "skipped       : sandboxed bash (the sample rg; the agent part runs retrieval-agent instead of rise)"
    if shutil.which("bwrap") is None:
        fix = f"install it: {ENABLE_BWRAP}" if sys.platform.startswith("linux") else "it needs Linux"
        return f"{what}: bubblewrap is not installed; {fix}"
    return f"{what}: {' '.join(reason.split())[:300]}"


def run(args: argparse.Namespace) -> int:
    from rise_batch.commands.workspace import sample_walk
    from rise_batch.config import load_structure_config
    from rise_batch.structuring.job import run_structure, summary_line

    cfg = load_structure_config(None, corpus=str(sample_corpus()), out=args.out, backend="heuristic", index=True)
    stats = run_structure(cfg)
    out = Path(cfg.out)
    print(f"sample corpus : {sample_corpus()}  ({stats['docs_total']} documents)")
    print(f"structured    : {out / 'corpus'}/<host>/<title>.txt")
    print(f"docmap        : {out / 'docmap.parquet'}")
    print(f"checkpoint    : {out / 'checkpoint'}/  (one row per document)")
    print(f"stats         : {out / 'stats.json'}")
    print(f"BM25 index    : {out / 'index'}  (over the original text; k1=1.5, b=0.75, English stemmer)")
    located = stats["anchors_located"] / max(stats["anchors_proposed"], 1)
    print(
        f"docs with TOC : {stats['docs_with_toc']}/{stats['docs_total']}   anchors located: {located:.1%}   "
        f"outcomes: {stats['outcomes']}"
    )
    print(summary_line(stats, cfg.out))
    print(
        f"\n$ rise-batch workspace search --index {out / 'index'} --docs {out} "
        f"--workspace {out / 'workspace'} {args.query!r}"
    )
    from rise_batch.agent.demo_run import demo_trajectories
    from rise_batch.fake_llm import FakeLLMServer
    from rise_batch.space.sandbox import probe

    support = probe()
    skip = None if support.ok else sandbox_skip_line(support.reason)
    rg = None if skip else "rg -l -i proudhon | head -5"
    sample_walk(out / "index", out, out / "workspace", [args.query], rg, k=20)
    with FakeLLMServer() as server:  # the demo's model: the scripted agent, nothing billed
        demo_trajectories(out, out / "runs", server.base_url, system="rise" if skip is None else "retrieval-agent")
    if skip:
        print(skip)
    return 0
