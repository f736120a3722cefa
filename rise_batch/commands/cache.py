"""`rise-batch cache list|prune`: what a node's cache of object-storage inputs holds, and removing what is not wanted.

Run on the node whose cache it is (each node has its own). Safe beside running jobs: an entry a run holds is shown
as in use and never removed (rise_batch/cache_admin.py).
"""

from __future__ import annotations

import argparse
import re
import sys

from rise_batch.option_paths import local, path_argument

_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def size_arg(text: str) -> int:
    """`500M`, `20G`, `1.5T`, `1048576` (bytes; K, M, G, T are powers of 1024, an optional trailing B or iB)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 500M, 20G, 1.5T)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def age_arg(text: str) -> float:
    """`90s`, `30m`, `12h`, `7d`, `2w` as seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not an age (e.g. 12h, 7d, 2w)")
    return float(m.group(1)) * _SECONDS[m.group(2).lower()]


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cache",
        help="list or prune this node's cache of object-storage inputs (docs trees, indexes)",
        description=(
            "A run whose --docs or --index is in object storage keeps a local copy on each node (--cache-dir). "
            "`list` shows each entry: kind, source, size, last use, and whether a run holds it. `prune` removes "
            "entries older or beyond a size than asked, or every entry no run holds; an entry in use is never "
            "removed. Run it on the node whose cache it is."
        ),
    )
    csub = p.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    ls = csub.add_parser("list", help="each entry: kind, source, size, last use, in use by a run or not")
    pr = csub.add_parser("prune", help="remove old, oversized or unused entries (never one a run holds)")
    for q in (ls, pr):
        path_argument(
            q, "--cache-dir", path=local("the node's cache is a directory on its own disk"),
            help="the cache root (default: $RISE_BATCH_CACHE, else ~/.cache/rise-batch)",
        )  # fmt: skip
        q.add_argument("--json", action="store_true", help="print the result as JSON")
        q.set_defaults(func=run)
    pr.add_argument("--older-than", type=age_arg, metavar="AGE", help="entries last used over AGE ago (12h, 7d)")
    pr.add_argument("--max-size", type=size_arg, metavar="SIZE", help="least recently used first, to at most SIZE")
    pr.add_argument("--unused", action="store_true", help="every entry no running job holds")
    pr.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")


def run(args: argparse.Namespace) -> int:
    import json

    from rise_batch.cache import cache_dir
    from rise_batch.cache_admin import entries, prune

    root = cache_dir(args.cache_dir)
    if args.cache_command == "list":
        got = entries(root)
        if args.json:
            print(json.dumps({"cache_dir": str(root), "entries": [e.to_json() for e in got]}, indent=1))
            return 0
        print(f"cache {root}: {len(got)} entries, {human(sum(e.bytes for e in got))}")
        for e in got:
            print("  " + _line(e))
        return 0
    if args.older_than is None and args.max_size is None and not args.unused:
        print("rise-batch cache prune: say what to remove: --older-than AGE, --max-size SIZE or --unused",
              file=sys.stderr)  # fmt: skip
        return 2
    res = prune(root, args.older_than, args.max_size, args.unused, args.dry_run)
    if args.json:
        print(json.dumps({"cache_dir": str(root), "freed_bytes": res.freed, "dry_run": args.dry_run,
                          "removed": [e.to_json() for e in res.removed],
                          "kept_in_use": [e.to_json() for e in res.kept_in_use]}, indent=1))  # fmt: skip
        return 0
    verb = "would remove" if args.dry_run else "removed"
    for e in res.removed:
        print(f"{verb} {_line(e)}")
    for e in res.kept_in_use:
        print(f"kept (in use) {_line(e)}")
    print(
        f"cache {root}: {verb} {len(res.removed)} entries, freed {human(res.freed)}; {len(res.kept_in_use)} in use kept"
    )
    return 0


def _line(e) -> str:
    import datetime

    when = datetime.datetime.fromtimestamp(e.last_use).astimezone().isoformat(timespec="seconds")
    state = (
        f"in use (pid {', '.join(map(str, e.holders))})"
        if e.in_use and e.holders
        else "in use"
        if e.in_use
        else "unused"
    )
    what = "" if e.finished else " [unfinished copy]"
    return f"{e.kind}/{e.key}{what}  {human(e.bytes)}  last use {when}  {state}  {e.source or '-'}"
