"""BM25 index over the original corpus text: sharded parallel build, memory-mapped search.

`from rise_batch.index import build_index, load_index, BM25Index, Hits, IndexMeta` works without importing
numpy or bm25s: names resolve to their submodule on first use, so the CLI and Ray workers stay light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rise_batch.index.build import IndexMeta, build_index
    from rise_batch.index.search import BM25Index, Hits, load_index
    from rise_batch.index.tokenize import TokenizerSettings

_WHERE = {
    "build_index": "build",
    "IndexMeta": "build",
    "load_index": "search",
    "BM25Index": "search",
    "Hits": "search",
    "TokenizerSettings": "tokenize",
}
__all__ = ["BM25Index", "Hits", "IndexMeta", "TokenizerSettings", "build_index", "load_index"]


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"rise_batch.index.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'rise_batch.index' has no attribute {name!r}")
