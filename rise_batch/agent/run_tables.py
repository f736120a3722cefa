"""The string tables a run reads, derived before its trajectories start, in a process that ends.

A docs dir's `docmap.strtab` and an index's `docids.strtab` / `vocab.strtab` (rise_batch/strtable.py) are derived
from their sources on first use when missing or stale. Derived inside a trajectory actor, the derivation's Python
objects stay in that actor's private memory for its whole life: at 1M documents the first run after `structure`
left one actor at ~460 MB where every later run's actors held ~160 MB. `structure` and `materialize` now write the
docs dir's table and the index build writes its own; what is still missing (a table deleted, an index built before
tables, a docs dir made by hand, a node's cached copy) is derived here, in a spawned process that exits once the
files are written, by the driver before any actor starts and by a worker after its node's copies are made. The
actors then only map the files.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from rise_batch.corpus.docmap_table import DOCMAP_FILE, DOCMAP_TABLE, mapped_docmap
from rise_batch.index.tables import DOCIDS_FILE, DOCIDS_TABLE, VOCAB_JSON, VOCAB_TABLE, docid_table, vocabulary
from rise_batch.storage import ObjectPath, location
from rise_batch.strtable import is_current

log = logging.getLogger(__name__)

Opener = Callable[[str | Path], Any]  # derives the table of a directory when it is missing or stale
DOCS_TABLES: tuple[tuple[str, str, Opener], ...] = ((DOCMAP_TABLE, DOCMAP_FILE, mapped_docmap),)
INDEX_TABLES: tuple[tuple[str, str, Opener], ...] = (
    (DOCIDS_TABLE, DOCIDS_FILE, docid_table),
    (VOCAB_TABLE, VOCAB_JSON, vocabulary),
)


def stale_tables(docs_dirs: Sequence[str | Path], index: str | Path | None) -> list[tuple[Path, Opener]]:
    """(table file, opener) of each table of these local directories that is missing or does not match its source
    (a source that is absent has no table: the retriever that needs it says so when it opens)."""
    wanted = [(Path(d), DOCS_TABLES) for d in dict.fromkeys(map(str, docs_dirs))]
    if index:
        wanted.append((Path(index), INDEX_TABLES))
    stale = []
    for directory, tables in wanted:
        for table, source, opener in tables:
            if (directory / source).exists() and not is_current(directory / table, directory / source):
                stale.append((directory / table, opener))
    return stale


def derive_ahead(docs_dirs: Sequence[str | Path], index: str | Path | None) -> list[Path]:
    """Derive every missing or stale table of these local directories in a spawned process that ends before this
    returns (its memory goes with it); returns the tables it derived. A source it refuses (an unsafe docmap, a file
    over its recorded size) is raised here as the opener raised it."""
    stale = stale_tables(docs_dirs, index)
    if not stale:
        return []
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pid = pool.submit(_derive, [(str(table.parent), opener) for table, opener in stale]).result()
    tables = [table for table, _ in stale]
    log.info("derived %s in a process of its own (pid %d), before any trajectory", ", ".join(map(str, tables)), pid)
    return tables


def derive_for_run(cfg: Any, uses_index: bool) -> list[Path]:
    """`derive_ahead` over a run's local docs dirs (--docs, --original-docs) and index (a RunConfig `cfg`); those in
    object storage are each node's cached copies, whose tables a worker derives after making them."""
    local = [d for d in (cfg.docs, cfg.original_docs) if d and not isinstance(location(d), ObjectPath)]
    index = cfg.index if uses_index and cfg.index and not isinstance(location(cfg.index), ObjectPath) else None
    return derive_ahead(local, index)


def _derive(calls: list[tuple[str, Opener]]) -> int:
    """In the spawned process: each opener on its directory (deriving and writing its table); returns this pid."""
    for directory, opener in calls:
        opener(directory)
    return os.getpid()
