"""A view added the way ARCHITECTURE.md's "A view" says, entirely inside this file: a toy `headings` view (each file
holds the structured file's `## ` heading lines, each with its line number there) registered in VIEWS with its
builder, a system naming it registered in SYSTEMS, the guides' lists showing both, and a real run of that system
(the fake server's scripted agent over HTTP, the real sandbox) reading the structured lines through it."""

from __future__ import annotations

import os

from rise_batch.agent.job import run_trajectories
from rise_batch.agent.systems import SYSTEMS, System
from rise_batch.agent.view_files import build_files, checkpoint_outcomes
from rise_batch.agent.views import STRUCTURED, VIEWS, View
from rise_batch.commands.doc_options import fill
from rise_batch.space.docstore import DocStore
from rise_batch.space.safe_open import read_from
from tests.agent.helpers import read_trajectories, run_config, run_dir, title_query, write_queries


def _write_headings(fd: int, st: os.stat_result, src: str, dst: str, rel: str, docid: str, row: tuple | None) -> None:
    lines = read_from(fd, st).decode("utf-8").split("\n")
    os.makedirs(os.path.dirname(f"{dst}/{rel}"), exist_ok=True)
    with open(f"{dst}/{rel}", "w", encoding="utf-8") as f:
        f.writelines(f"L{i}: {line}\n" for i, line in enumerate(lines, 1) if line.startswith("## "))


def build_headings(docs, tmp, workers: int) -> None:
    build_files(docs, tmp, workers, checkpoint_outcomes(docs), _write_headings)


HEADINGS = View(
    name="headings", dir="headings", build=build_headings, rule="headings v1\n", headings=True, lines_of=STRUCTURED,
    help="the structured files' heading lines, each with its line number",
)  # fmt: skip


def test_a_view_registered_in_one_file_reaches_the_docs_and_a_run(agent_world, fake_server, monkeypatch):
    monkeypatch.setitem(VIEWS, "headings", HEADINGS)
    system = System(name="rise-headings", label="RISE headings", prompt="agent_rise_toc", docs="headings",
                    tools="rise", help="RISE over heading lines")  # fmt: skip  # the view it names is registered
    monkeypatch.setitem(SYSTEMS, "rise-headings", system)
    docs = fill("<!-- list: views -->\n<!-- /list -->\n<!-- list: systems -->\n<!-- /list -->")
    assumed = "sections under `## ` headings, its line numbers are lines of the structured files, which `read` opens"
    listed = (
        f"- `headings`: the structured files' heading lines, each with its line number; tools may assume: {assumed}"
    )
    assert f"{listed}; used by `rise-headings`\n" in docs
    assert "tools: rise; view: headings" in docs
    out = run_dir("view-extension")
    docid, title = next(iter(agent_world.titles.items()))
    queries = write_queries(out / "q.jsonl", [title_query(docid, title)])
    stats = run_trajectories(run_config(out / "run", queries, fake_server.base_url, system="rise-headings"))
    assert stats["stop_reasons"] == {"answered": 1}, stats
    view, structured = DocStore(agent_world.docs / "headings"), DocStore(agent_world.docs)
    full = structured.path(docid).read_text(encoding="utf-8").split("\n")
    for line in view.path(docid).read_text(encoding="utf-8").splitlines():
        number, heading = line.split(": ", 1)
        assert full[int(number[1:]) - 1] == heading  # each points at its heading in the structured file
    [t] = read_trajectories(out / "run").values()
    reads = [s for s in t["steps"] if s["tool"] == "read"]
    assert reads and all("\t" in s["output"] for s in reads)  # numbered lines of the structured file
    assert title.lower() in t["exact_answer"].lower() and docid in t["retrieved_docids"]
