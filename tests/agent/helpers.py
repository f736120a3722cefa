"""A small real world for trajectory tests: structured docs + BM25 index from the sample corpus, and queries.

Built once per test process (the structure job and the index build are the real ones), in a world-traversable
temporary directory, because the sandbox runs agent commands as an unprivileged uid.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from tests.conftest import SAMPLE, sample_rows

N_DOCS = 30
_BUILT: dict[str, World] = {}


class World(NamedTuple):
    root: Path
    docs: Path  # structured docs (a structure output) with index/ inside
    index: Path
    titles: dict[str, str]  # docid -> title


def title_of(text: str) -> str:
    return text.split("title: ", 1)[1].split("\n", 1)[0].strip('"')


def world() -> World:
    """The shared docs + index (built on first use in this process)."""
    if "w" not in _BUILT:
        from rise_batch.config import load_structure_config
        from rise_batch.structuring.job import run_structure

        root = Path(tempfile.mkdtemp(prefix="rise-agent-test-"))
        os.chmod(root, 0o755)
        atexit.register(shutil.rmtree, root, True)
        cfg = load_structure_config(
            None,
            corpus=str(SAMPLE),
            out=str(root / "docs"),
            backend="heuristic",
            limit=N_DOCS,
            workers=0,
            index=True,
            progress=False,
        )
        run_structure(cfg)
        titles = {r["docid"]: title_of(r["text"]) for r in sample_rows(N_DOCS)}
        _BUILT["w"] = World(root, root / "docs", root / "docs" / "index", titles)
    return _BUILT["w"]


def title_query(docid: str, title: str, marker: str = "", **extra: Any) -> dict[str, Any]:
    """A question the scripted agent answers by grepping the quoted title and reading the article."""
    text = f"What does the article on '{title}' say about it? {marker}".strip()
    return {"query_id": docid, "query": text, "answer": title, "gold_doc_ids": [docid], **extra}


def write_queries(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run_dir(name: str) -> Path:
    """A fresh world-traversable directory for a run (its workspaces live inside it)."""
    d = world().root / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(mode=0o755)
    return d


def read_trajectories(out: Path) -> dict[str, dict[str, Any]]:
    rows = [json.loads(p.read_text()) for p in (out / "trajectories").glob("*.json")]
    return {r["query_id"]: r for r in rows}


def run_config(out: Path, queries: Path, base_url: str, **over: Any):
    from rise_batch.agent.run_config import load_run_config

    w = world()
    opts: dict[str, Any] = dict(
        queries=str(queries),
        system="rise",
        out=str(out),
        docs=str(w.docs),
        index=str(w.index),
        workers=0,
        concurrency=4,
        index_backend="numpy",
        progress=False,
        llm_base_url=base_url,
        llm_model="gpt-5.4-mini",
        llm_rpm=1_000_000,
        llm_tpm=10**10,
        llm_max_attempts=2,
    )
    opts.update(over)
    return load_run_config(None, **opts)
