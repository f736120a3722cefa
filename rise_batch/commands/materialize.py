"""`rise-batch materialize`: rewrite OUT/corpus/ from the checkpoint (e.g. after deleting it to save space)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "materialize",
        help="re-create OUT/corpus/<relpath> files from a finished run's checkpoint",
        description="Re-render every checkpointed document into OUT/corpus/ (no LLM calls).",
    )
    p.add_argument("out", help="the output directory of a `structure` run")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from rise_batch.corpus.scan import shards_from_json
    from rise_batch.progress import Progress
    from rise_batch.structuring.job import MANIFEST
    from rise_batch.structuring.shard import materialize_shard
    from rise_batch.structuring.verify import require_intact

    out = Path(args.out)
    manifest = json.loads((out / MANIFEST).read_text())
    shards = shards_from_json(manifest["shards"])
    require_intact(out, shards)  # a damaged part or marker: one line naming it and the command that repairs it
    n = 0
    with Progress("materialize", len(shards), "shards") as bar:
        for spec in shards:
            n += materialize_shard(out, spec, manifest["config"]["max_doc_chars"])
            bar.update(1)
    missing = manifest["n_docs"] - n  # documents of an unfinished run are said to be missing, never left out quietly
    note = f" missing={missing} (not structured yet: re-run `rise-batch structure` to finish)" if missing else ""
    print(f"materialize docs={n}{note} out={out / 'corpus'}")
    return 0
