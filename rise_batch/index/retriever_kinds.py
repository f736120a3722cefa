"""The retrievers a spec can name and the index parts they open, as registries light enough for option help and
choices (no index code loaded: every hook is a `Lazy("module:function")`).

A retriever is defined here and nowhere else. Its `RetrieverKind` says which parts it opens and how (`open`); each
part's `IndexPart` says how `rise-batch index` builds it (`build`, and `check` before any part is built) and which
file marks it whole (`marker`: the part's record of its parameters and counts, written last). The index command,
`open_retriever`, `parts_present`, `default_retriever`, the done marker of a published index (`index_marker`), the
storage probe's fingerprint, `--retriever`'s choices and help and the guides' list all read these tables.

The one rule every index follows: its directory holds `docids.json` (`DOCIDS_FILE`), a JSON list of docid strings,
row -> docid, the same rows in every part. `run` checks it against the docs directory (an index over another
corpus is refused) and the hits of every part name these docids; the index command refuses a build that wrote none.

A module outside the package registers its own entries (`PARTS.add`, `RETRIEVERS.add`) and is imported by naming it in
`RISE_BATCH_PLUGINS` (rise_batch/registry.py:load_plugins).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rise_batch.registry import Lazy, Registry

DOCIDS_FILE = "docids.json"  # every index holds it: row -> docid, the same rows in every part


@dataclass(frozen=True, kw_only=True)
class PartBuild:
    """What a part's build hook is given by `rise-batch index`: where to read and write, and how to run. `out` is a
    local directory that the command publishes (renamed over --out, or uploaded to object storage) once every part
    of the retriever is built; `args` holds every flag of the command, for a part's own options."""

    corpus: str
    out: str
    workers: int
    shard_docs: int
    on_bad_row: str
    columns: str
    ray_address: str | None  # None: no Ray; "" or "auto": a local or the running cluster
    log: Callable[[str], None]
    args: Any


@dataclass(frozen=True, kw_only=True)
class IndexPart:
    """A part of an index directory, built by `rise-batch index` and opened by the retrievers that name it.

    `build(PartBuild) -> str` builds the part into `PartBuild.out` (beside the parts built before it) and returns its
    one summary line (`index NAME k=v ...`); `check(args)`, when given, refuses bad settings before any part is
    built; `marker` is the part's record, a path relative to the index directory, written last by its build, so its
    presence means the part is whole."""

    name: str
    marker: str
    build: Callable[[PartBuild], str]
    check: Callable[[Any], None] | None = None
    help: str


PARTS: Registry[IndexPart] = Registry(
    "index part",
    [
        IndexPart(
            name="bm25", marker="meta.json", build=Lazy("rise_batch.index.parts:build_bm25"),
            help="bm25s's arrays, the vocabulary and meta.json",
        ),
        IndexPart(
            name="dense", marker="dense/meta.json", build=Lazy("rise_batch.index.parts:build_dense_part"),
            check=Lazy("rise_batch.index.parts:check_dense"), help="dense/: one float16 vector per passage",
        ),
    ],
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class RetrieverKind:
    """A retriever a spec can name: the index parts it opens (`index --retriever` builds them, in this order),
    `open(index_dir, spec, *, embedder=None, backend="auto", **kw)` -> an object with `search(queries, k)`,
    `docids` and `len()` (an opener ignores the keywords it does not use), whether its spec takes a fusion
    (`hybrid:rrf:60`) and the fusion a bare name means (`default`), and what the guides say of it."""

    name: str
    parts: tuple[str, ...]
    open: Callable[..., Any]
    fused: bool = False
    default: str = ""
    help: str

    def __post_init__(self) -> None:
        for part in self.parts:
            PARTS.lookup(part)  # an unknown part is refused when the entry is made, not when an index is built


RETRIEVERS: Registry[RetrieverKind] = Registry(
    "retriever",
    [
        RetrieverKind(
            name="bm25", parts=("bm25",), open=Lazy("rise_batch.index.parts:open_bm25"),
            help="BM25 over the original text (k1=1.5, b=0.75), the default",
        ),
        RetrieverKind(
            name="dense", parts=("dense",), open=Lazy("rise_batch.index.parts:open_dense"),
            help="an embedding model's exact cosine top-k (`.[dense]`)",
        ),
        RetrieverKind(
            name="hybrid", parts=("bm25", "dense"), open=Lazy("rise_batch.index.parts:open_hybrid"), fused=True,
            default="weighted:0.7",
            help="both, fused: `hybrid` is `hybrid:weighted:0.7`; also `hybrid:rrf[:K]`, `hybrid:weighted[:W]`",
        ),
    ],
)  # fmt: skip


def retrievers_help() -> str:
    """The registered retrievers as option help says them."""
    return "; ".join(f"{r.name}: {r.help}" for r in RETRIEVERS.values())


def spec_help() -> str:
    """What a `--retriever` spec may be, as option help says it."""
    fused = [r for r in RETRIEVERS.values() if r.fused]
    forms = [f"{r.name}:rrf[:K]" for r in fused] + [f"{r.name}:weighted[:W]" for r in fused]
    defaults = ", ".join(f"{r.name} = {r.name}:{r.default}" for r in fused if r.default)
    names = ", ".join(RETRIEVERS) + (f" ({defaults})" if defaults else "")
    return f"{names}, or {' or '.join(forms)} (W = BM25's weight)" if forms else names


def parts_present(index_dir: str | Path) -> list[str]:
    """Which parts an index directory holds, by their markers: a marker of any kind counts, so one that is not a
    regular file is refused by name where it is opened, not taken for a missing part."""
    d = Path(index_dir)
    return [p.name for p in PARTS.values() if os.path.lexists(d / p.marker)]


def default_retriever(index_dir: str | Path) -> str:
    """The first registered retriever whose parts the directory holds (bm25 when it has it, today's behaviour),
    else the first registered."""
    have = set(parts_present(index_dir))
    return next((r.name for r in RETRIEVERS.values() if set(r.parts) <= have), next(iter(RETRIEVERS)))


def index_marker(index_dir: Any) -> str:
    """The done marker of an index directory (a local path or an ObjectPath), written last when it is published to
    object storage: the marker of the first registered part it holds (a hybrid index's dense part is published
    before the BM25 part's meta.json), else the first part's."""
    markers = [p.marker for p in PARTS.values()]
    return next((m for m in markers if (index_dir / m).is_file()), markers[0])
