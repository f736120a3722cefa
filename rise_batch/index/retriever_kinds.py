"""The retrievers a spec can name, as a registry light enough for option help and choices (no index code loaded).

rise_batch/index/retriever.py opens them; `index --retriever`, `--retriever` of run, search and eval-retrieval, their
help and the guides' list read this table.
"""

from __future__ import annotations

from dataclasses import dataclass

from rise_batch.registry import Registry


@dataclass(frozen=True, kw_only=True)
class RetrieverKind:
    """A retriever a spec can name: the index parts it opens (`index --retriever` builds them), whether its spec takes
    a fusion (`hybrid:rrf:60`), and what the guides say of it."""

    name: str
    parts: tuple[str, ...]
    fused: bool = False
    help: str


RETRIEVERS: Registry[RetrieverKind] = Registry(
    "retriever",
    [
        RetrieverKind(name="bm25", parts=("bm25",), help="BM25 over the original text (k1=1.5, b=0.75), the default"),
        RetrieverKind(name="dense", parts=("dense",), help="an embedding model's exact cosine top-k (`.[dense]`)"),
        RetrieverKind(
            name="hybrid", parts=("bm25", "dense"), fused=True,
            help="both, fused: `hybrid` is `hybrid:weighted:0.7`; also `hybrid:rrf[:K]`, `hybrid:weighted[:W]`",
        ),
    ],
)  # fmt: skip


def retrievers_help() -> str:
    """The registered retrievers as option help says them."""
    return "; ".join(f"{r.name}: {r.help}" for r in RETRIEVERS.values())


def spec_help() -> str:
    """What a `--retriever` spec may be, as option help says it."""
    fused = [r.name for r in RETRIEVERS.values() if r.fused]
    forms = [f"{n}:rrf[:K]" for n in fused] + [f"{n}:weighted[:W]" for n in fused]
    return f"{', '.join(RETRIEVERS)} (hybrid = hybrid:weighted:0.7), or {' or '.join(forms)} (W = BM25's weight)"
