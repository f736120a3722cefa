"""`rise-batch export bcp RUN_DIR --out DIR`: a run directory as BrowseComp-Plus run files, for BCP's own scripts."""

from __future__ import annotations

import argparse

from rise_batch.option_paths import URI, path_argument


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write a run directory in another tool's format (bcp: BrowseComp-Plus run files)",
        description=(
            "bcp: one JSON per query in DIR with query_id, status (completed / incomplete), result (tool calls, "
            "then the final reply as output_text, its cited files rewritten as [docid]), tool_call_counts, "
            "retrieved_docids and metadata.model, which BrowseComp-Plus's scripts_evaluation/evaluate_run.py and "
            "evaluate_with_openai.py read as --input_dir."
        ),
    )
    p.add_argument("format", choices=["bcp"], help="output format")
    path_argument(p, "run_dir", path=URI, metavar="RUN_DIR", help="a run directory of `rise-batch run`")
    path_argument(p, "--out", path=URI, required=True, help="output directory (created; must hold no .json file)")
    path_argument(
        p, "--docs", path=URI, help="docs directory whose docmap maps cited files to docids (default: the run's)"
    )
    p.add_argument("--force", action="store_true", help="replace the .json files already in --out")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rise_batch.eval.export import export_bcp

    counts = export_bcp(args.run_dir, args.out, docs=args.docs, force=args.force)
    stale = f", {counts['stale_left_out']} of another configuration left out" if counts["stale_left_out"] else ""
    print(
        f"export bcp: {counts['files']} run files in {args.out} ({counts['completed']} completed, "
        f"{counts['incomplete']} incomplete{stale})"
    )
    return 0
