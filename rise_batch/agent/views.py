"""What an agent sees: the document views, a registry, one entry per view.

A view is a set of files with the same relpaths and docmap as the structured docs directory (DOCS), made from it:
the structured files themselves, the original text (the TOC and headings removed, agent/originals.py), each
document's table of contents alone (agent/toc_view.py). A system names the view its tools open (`System.docs` in
agent/systems.py); nothing compares a view's name, the job and the workers ask its entry:

- how its files are made: `build`, a builder `(DOCS, staging dir, workers)` run once per node into DOCS/<dir>/ under
  a lock (agent/view_files.py), so a node whose DOCS is a cached copy of a `structure` OUT in object storage derives
  its own; None for the structured files, which are DOCS itself;
- what a docs directory that was never structured is of it (`plain_is_view`: the original text is the corpus as
  materialized; a TOC-only view of it cannot be made, and is refused in one line);
- the option a user passes their own copy with (`option`, a RunConfig field such as `original_docs`);
- what its tools may assume (`toc`: every file starts with a table of contents; `headings`: sections start on `## `
  lines; `lines_of`: its entries point at the lines of another view's file of the same relpath, which `read` opens).

Adding a view is one `View(...)` here and its builder; a system then names it (ARCHITECTURE.md, "A view").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rise_batch.errors import ConfigError
from rise_batch.registry import Lazy, Registry

STRUCTURED, ORIGINAL, TOC = "structured", "original", "toc"


@dataclass(frozen=True, kw_only=True)
class View:
    name: str
    help: str  # what the guides' list of views says
    dir: str | None = None  # DOCS/<dir>/ where it is built; None: DOCS itself
    build: Callable[[Path, Path, int], None] | None = None  # (DOCS, staging dir, workers): fills corpus/<relpath>
    rule: str = ""  # the build rule its marker records: a view built by another rule is rebuilt
    plain_is_view: bool = False  # a docs dir never structured (no checkpoint) already holds this view's files
    option: str | None = None  # the RunConfig field naming a user's own copy of it
    toc: bool = False  # every file starts with a table of contents (`## Table of Contents`, `- L<a>–<b>: ...`)
    headings: bool = False  # each TOC section starts on a `## ` heading line of the file `read` opens
    lines_of: str | None = None  # the view whose files its TOC line ranges count (read opens those); None: its own

    def __post_init__(self) -> None:
        if (self.dir is None) != (self.build is None):
            raise ConfigError(f"view {self.name}: a view built into DOCS/<dir>/ needs both `dir` and `build`")


VIEWS: Registry[View] = Registry(
    "view",
    [
        View(name=STRUCTURED, toc=True, headings=True,
             help="the structured files (DOCS itself), the TOC's line ranges their own lines"),
        View(name=ORIGINAL, dir="original", build=Lazy("rise_batch.agent.originals:build_original"),
             rule="checkpoint-outcome+content-hash v1\n", plain_is_view=True, option="original_docs",
             help="the documents as the corpus holds them (TOC and inserted headings removed, each checked against "
                  "the checkpoint's content hash), built once into DOCS/original/"),
        View(name=TOC, dir="toc", build=Lazy("rise_batch.agent.toc_view:build_toc"), toc=True, headings=True,
             rule="toc-only: the structured file's TOC block, lines of the structured file v1\n", lines_of=STRUCTURED,
             help="each document's table of contents alone (a document without one: one entry, its whole body), "
                  "built once into DOCS/toc/"),
    ],
)  # fmt: skip


def user_copy(view: View, cfg: Any) -> str | None:
    """The user's own copy of the view (its option, e.g. --original-docs), unless that names DOCS/<dir> itself."""
    own = getattr(cfg, view.option) if view.option else None
    if not own or (view.dir and Path(own) == Path(cfg.docs) / view.dir):
        return None
    return own


def view_docs(view: View, docs_dir: str | Path, workers: int) -> Path:
    """The docs directory holding the view's files, built from DOCS on first use on this node (agent/view_files)."""
    from rise_batch.agent.view_files import complete, derived_dir, is_structure_output  # lazy: loads pyarrow

    docs = Path(docs_dir)
    if view.build is None or view.dir is None:
        return docs
    if complete(docs, docs / view.dir, view.rule):
        return docs / view.dir
    if not is_structure_output(docs):
        if view.plain_is_view:
            return docs
        raise ConfigError(
            f"docs {docs}: the {view.name} view is made from a `rise-batch structure` output (manifest.json and "
            "checkpoint/), which this directory is not; pass the OUT of `rise-batch structure`"
        )
    return derived_dir(docs, view.dir, view.rule, view.build, workers)


def docs_for(view: View, cfg: Any, workers: int) -> str:
    """The docs a run's `cfg` (a RunConfig) reads for `view`: the user's own copy, or the view of cfg.docs."""
    return user_copy(view, cfg) or str(view_docs(view, cfg.docs, workers))


def view_built(view: View, docs_dir: str | Path) -> bool:
    """Is the view already there (nothing to build) in DOCS?"""
    from rise_batch.agent.view_files import COMPLETE  # lazy: loads pyarrow

    return view.dir is None or (Path(docs_dir) / view.dir / COMPLETE).is_file()
