"""`rise-batch workspace search|bash|read|info`: walk an interaction space by hand, as an agent would.

Each call is one tool call against a workspace directory that persists between commands (its manifest records
what arrived when), so a person can reproduce or debug a trajectory step by step.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from rise_batch.agent.run_config import RunConfig
from rise_batch.index.retriever_kinds import spec_help
from rise_batch.option_paths import URI, local, path_argument
from rise_batch.options import Entry, Layout, Section, add_layout, option, same_as

WS_LOCAL = local("a workspace is a local directory of hardlinks into the corpus, read through the sandbox")


@dataclass(frozen=True)
class SearchOptions:
    """`workspace search`'s settings (its flags and docs/retrieval.md's table)."""

    index: str = option("", path=URI, help="index directory (from `rise-batch index`)")
    docs: str = option(
        "",
        path=URI,
        help="materialized docs dir: DIR/corpus/<relpath> + DIR/docmap.parquet (or a `structure` OUT in object "
        "storage, copied once into the node's cache)",
    )
    workspace: str = option("", metavar="WS", path=WS_LOCAL, help="workspace directory (created if missing)")
    k: int = option(1000, flag="-k", help="documents linked per query")
    preview: int = option(10, help="previewed hits per query")
    backend: str = option(
        "numpy",
        choices=("numpy", "numba", "auto"),
        help="BM25 scorer (numba's compile, seconds, outweighs one search)",
    )
    retriever: str | None = option(
        None,
        help=spec_help,
        shown="bm25 when the index has it, else dense",
    )
    embedder: str | None = option(
        None, help="dense/hybrid: must match the index's model", shown="the index's recorded model"
    )


@dataclass(frozen=True)
class BashOptions:
    """`workspace bash`'s settings: the per-call limits an agent's bash gets in a run (RunConfig's)."""

    timeout: float = same_as(RunConfig, "bash_timeout_s", help="wall-clock cap in seconds")
    max_output: int = same_as(RunConfig, "bash_max_output_chars", help="characters of output kept")
    unsandboxed: bool = option(
        False, help="DANGEROUS: run without bubblewrap if it is unavailable (commands can then modify the corpus)"
    )


@dataclass(frozen=True)
class ReadOptions:
    """`workspace read`'s settings."""

    offset: int = option(0, help="0-indexed first line")
    limit: int = option(2000, help="number of lines")


_REQUIRED = tuple(Entry(k, required=True) for k in ("index", "docs", "workspace"))
SEARCH_OPTIONS = Layout(
    SearchOptions, (Section(None, (*_REQUIRED, "k", "preview", "backend", "retriever", "embedder")),), from_file=False
)
BASH_OPTIONS = Layout(BashOptions, (Section(None, ("timeout", "max_output", "unsandboxed")),), from_file=False)
READ_OPTIONS = Layout(ReadOptions, (Section(None, ("offset", "limit")),), from_file=False)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "workspace",
        help="walk a per-query interaction space by hand: search into it, run sandboxed bash, read files",
        description=(
            "The RISE tools from the command line. `search` links the union of its queries' top-K documents into "
            "WS (creating it), `bash` runs a command in the sandbox with WS as its read-only working directory, "
            "`read` prints numbered lines of a WS file. WS persists until you delete it."
        ),
    )
    wsub = p.add_subparsers(dest="ws_command", metavar="ACTION", required=True)

    s = wsub.add_parser(
        "search", help="search (bm25, dense or hybrid); link each query's top-K documents into the workspace"
    )
    add_layout(s, SEARCH_OPTIONS)
    s.add_argument("queries", nargs="+", help="one or more keyword queries")
    s.set_defaults(func=run)

    b = wsub.add_parser("bash", help="run a shell command in the sandbox, WS read-only as the working directory")
    _ws_argument(b)
    b.add_argument("shell_command", metavar="command", help='e.g. "rg -l Lyon | head"')
    add_layout(b, BASH_OPTIONS)
    b.set_defaults(func=run, command_name="workspace bash")

    r = wsub.add_parser("read", help="print numbered lines of a workspace file")
    _ws_argument(r)
    r.add_argument("path", help="path relative to the workspace, as rg/ls print it")
    add_layout(r, READ_OPTIONS)
    r.set_defaults(func=run)

    i = wsub.add_parser("info", help="size of the workspace and what each search call added")
    _ws_argument(i)
    i.set_defaults(func=run)


def _ws_argument(p: argparse.ArgumentParser) -> None:
    path_argument(
        p, "workspace", path=WS_LOCAL, metavar="WS", help="workspace directory (made by `rise-batch workspace search`)"
    )


def run(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from rise_batch.space.manifest import FILES, MANIFEST, check_workspace

    ws_dir = Path(args.workspace)
    if args.ws_command == "search":
        return _search(args, ws_dir)
    if not (ws_dir / MANIFEST).exists():
        print(
            f"rise-batch workspace: {ws_dir} is not a workspace (no {MANIFEST}); create one with search",
            file=sys.stderr,
        )
        return 2
    if args.ws_command == "bash":  # a bad flag is named before the directory is looked at
        from rise_batch.space.sandbox import check_limit

        check_limit("--timeout", args.timeout)  # NaN, inf, 0 and negatives: exit 2 naming the flag
        check_limit("--max-output", args.max_output, integer=True)
    check_workspace(ws_dir)  # made by the engine, files/ no link (bash would bind what a link names): else exit 2
    if args.ws_command == "bash":
        from rise_batch.space.sandbox import Sandbox, SandboxLimits

        limits = SandboxLimits(timeout_s=args.timeout, max_output_chars=args.max_output)
        box = Sandbox(ws_dir / FILES, limits, allow_unsandboxed=args.unsandboxed)  # SandboxUnavailable: exit 2
        res = box.run(args.shell_command)
        print(res.render(limits.timeout_s))
        return 0 if res.exit_code == 0 else 1
    if args.ws_command == "read":
        from rise_batch.space.safe_open import Below
        from rise_batch.space.tools import read_in

        res = read_in(Below(ws_dir / FILES), args.path, args.offset, args.limit, lambda _rel: None)
        print(res.text, file=sys.stderr if res.error else sys.stdout)
        return 1 if res.error else 0
    return _info(ws_dir)


def _search(args: argparse.Namespace, ws_dir) -> int:
    from rise_batch.index.retriever import default_retriever, open_retriever
    from rise_batch.space.docstore import DocStore
    from rise_batch.space.tools import search_into
    from rise_batch.space.workspace import Workspace

    retriever = args.retriever or default_retriever(args.index)
    store = DocStore(local_docs_dir(args.docs))  # docs and index are checked before WS is made
    index = open_retriever(args.index, retriever, embedder=args.embedder, backend=args.backend)
    ws = Workspace(ws_dir, store, keep=True)
    res = search_into(index, ws, args.queries, args.k, args.preview)
    print(res.text)
    print(f'(workspace: {ws.path}; explore with `rise-batch workspace bash {ws.path} "rg -l WORD | head"`)')
    return 1 if res.error else 0


def local_docs_dir(docs: str) -> str:
    """`docs` itself, or for a `structure` OUT in object storage this node's verified copy of it (made once, as a
    run's workers make theirs): a workspace hardlinks files of a local tree."""
    from rise_batch.storage import is_local_path

    if is_local_path(docs):
        return docs
    from rise_batch.agent.inputs import local_docs
    from rise_batch.cache import cache_dir

    return str(local_docs(docs, cache_dir()).path)


def _info(ws_dir) -> int:
    from collections import Counter

    from rise_batch.space.manifest import read_manifest

    calls = Counter(a.call for a in read_manifest(ws_dir))
    print(f"workspace {ws_dir}: {sum(calls.values()):,} documents from {len(calls)} search calls")
    for call in sorted(calls):
        print(f"  call {call}: +{calls[call]:,}")
    return 0


def sample_walk(index_dir, docs_dir, ws_dir, queries: list[str], command: str | None, k: int = 1000) -> int:
    """A search into a fresh workspace and one sandboxed command, printed; `rise-batch demo` ends with it.
    `command=None` stops after the search (the demo does so where no sandbox can run, and says so itself)."""
    import shutil
    import sys

    from rise_batch.index import load_index
    from rise_batch.space.docstore import DocStore
    from rise_batch.space.sandbox import Sandbox, SandboxUnavailable
    from rise_batch.space.tools import search_into
    from rise_batch.space.workspace import Workspace

    shutil.rmtree(ws_dir, ignore_errors=True)
    ws = Workspace(ws_dir, DocStore(docs_dir), keep=True)
    print(search_into(load_index(index_dir, backend="numpy"), ws, queries, k, preview=3).text)
    if command is None:
        return 0
    print(f"\n$ rise-batch workspace bash {ws.path} {command!r}")
    try:
        print(Sandbox(ws.files_dir)(command))
    except SandboxUnavailable as e:
        print(f"(skipped: {e})", file=sys.stderr)
    return 0
