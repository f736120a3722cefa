"""`rise-batch materialize`: write the structured corpus tree from a run's checkpoint (e.g. after deleting OUT/corpus/
to save space, or from an OUT in object storage, which holds the checkpoint but no file per document)."""

from __future__ import annotations

import argparse

from rise_batch.option_paths import URI, local, path_argument


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "materialize",
        help="re-create OUT/corpus/<relpath> files from a finished run's checkpoint",
        description="Re-render every checkpointed document into OUT/corpus/, or into --dest (no LLM calls).",
    )
    path_argument(
        p, "out", path=URI, help="the output directory of a `structure` run (a path or a URI such as s3://bucket/run)"
    )
    path_argument(
        p,
        "--dest",
        path=local(
            "the tree is one file per document for hardlinked workspaces and rg (in object storage the "
            "checkpoint is the corpus)"
        ),
        help="write the tree here instead of OUT/corpus/ (a local directory; required when OUT is object storage)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rise_batch.corpus.docmap_table import mapped_docmap
    from rise_batch.corpus.scan import shards_from_json
    from rise_batch.io import read_json
    from rise_batch.progress import Progress
    from rise_batch.storage import ObjectPath, location
    from rise_batch.structuring.job import MANIFEST
    from rise_batch.structuring.shard import materialize_shard
    from rise_batch.structuring.verify import require_intact

    out = location(args.out)
    if args.dest is None and isinstance(out, ObjectPath):
        raise ValueError(f"{out} is object storage: name a local directory for the tree with --dest DIR")
    dest = Path(args.dest) if args.dest is not None else Path(out) / "corpus"
    manifest = read_json(out / MANIFEST)
    shards = shards_from_json(manifest["shards"])
    require_intact(out, shards)  # a damaged part or marker: one line naming it and the command that repairs it
    n = 0
    with Progress("materialize", len(shards), "shards") as bar:
        for spec in shards:
            n += materialize_shard(out, spec, manifest["config"]["max_doc_chars"], dest=dest)
            bar.update(1)
    if not isinstance(out, ObjectPath):  # the docs dir's table too, so that no run's actor derives it
        mapped_docmap(out)
    missing = manifest["n_docs"] - n  # documents of an unfinished run are said to be missing, never left out quietly
    note = f" missing={missing} (not structured yet: re-run `rise-batch structure` to finish)" if missing else ""
    print(f"materialize docs={n}{note} out={dest}")
    return 0
