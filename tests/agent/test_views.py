"""Document views (agent/views.py) from a real structuring output, and RISE-TOC end to end.

Each view is built from a real heuristic `structure` run over the bundled sample corpus plus two trap documents (a
short page that is its own TOC-like block and gets no TOC; a whole earlier-structured document as corpus text): the
structured files are DOCS itself, the original twin gives back the corpus text, and every TOC-only file holds the
structured file's frontmatter and TOC, each entry a line range whose first line is that section's `## ` heading in
the structured file (a document without a TOC: one entry, its whole body). Then `rise-batch run --system rise-toc`
in a real subprocess, against the fake server's scripted agent over HTTP and the real bubblewrap sandbox: it greps
the TOC-only files of its workspace and reads the structured lines an entry points at.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rise_batch.agent.systems import SYSTEMS, System
from rise_batch.agent.toc_view import WHOLE
from rise_batch.agent.views import ORIGINAL, STRUCTURED, TOC, VIEWS, view_docs
from rise_batch.config import ConfigError
from rise_batch.space.docstore import DocStore
from rise_batch.space.tools import RiseTools
from rise_batch.space.workspace import Workspace
from rise_batch.structure.anchors import body_start_line
from rise_batch.structure.render import BODY_MARKER, TOC_HEADER
from tests.agent.helpers import read_trajectories, run_dir, title_query, write_queries
from tests.agent.test_originals import structure, trap_corpus

ENTRY = re.compile(r"^- L(\d+)\u2013(\d+): (.*)$")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict[str, str], dict[str, str]]:
    """(DOCS of a heuristic structure run, corpus text by docid, outcome by docid)."""
    root = tmp_path_factory.mktemp("views")
    texts = trap_corpus(root / "c.jsonl")
    outcomes = structure(root / "c.jsonl", root / "docs", "heuristic")
    assert outcomes["trap-short"] == "too-short" and "toc" in outcomes.values()
    return root / "docs", texts, outcomes


def entries(text: str) -> list[tuple[int, int, str]]:
    return [(int(m[1]), int(m[2]), m[3]) for m in map(ENTRY.match, text.split("\n")) if m]


def test_every_view_is_built_from_the_structure_output(built):
    docs, texts, _ = built
    structured = DocStore(docs)
    for view in VIEWS.values():
        got = view_docs(view, docs, workers=1)
        assert (got == docs) == (view.build is None), view.name
        store = DocStore(got)
        assert dict(store.relpath) == dict(structured.relpath), view.name  # same relpaths, same docmap
        for docid in texts:
            assert store.path(docid).is_file(), (view.name, docid)
        assert view_docs(view, docs, workers=1) == got  # built once: the second call reuses it
    original = DocStore(view_docs(VIEWS[ORIGINAL], docs, workers=1))
    assert all(original.path(d).read_text(encoding="utf-8") == t for d, t in texts.items())


def test_toc_only_files_point_at_the_structured_files_heading_lines(built):
    docs, texts, outcomes = built
    structured, toc = DocStore(docs), DocStore(view_docs(VIEWS[TOC], docs, workers=1))
    for docid in texts:
        full = structured.path(docid).read_text(encoding="utf-8")
        only = toc.path(docid).read_text(encoding="utf-8")
        lines = full.split("\n")
        if lines[-1] == "":
            lines.pop()
        found = entries(only)
        assert found and TOC_HEADER in only and BODY_MARKER not in only, docid
        assert only.count("\n") == only.split(TOC_HEADER)[0].count("\n") + 1 + len(found), "TOC lines only"
        if outcomes[docid] == "toc":
            assert full.startswith(only), docid  # the structured file's own head, byte for byte
            for i, (start, end, rest) in enumerate(found):
                heading = lines[start - 1]
                assert heading.startswith("## ") and rest.startswith(heading[3:]), (docid, start, heading)
                assert end == (found[i + 1][0] - 1 if i + 1 < len(found) else len(lines))  # contiguous to the end
        else:  # no TOC: one entry, the whole body after the frontmatter
            [(start, end, rest)] = found
            assert end == len(lines) and rest.endswith(WHOLE), (docid, found)
            assert start == body_start_line(full) + 1, (docid, start)  # the first line after any frontmatter


def test_read_opens_the_structured_lines_of_workspace_files_only(built, tmp_path):
    docs, texts, _ = built
    structured, toc = DocStore(docs), DocStore(view_docs(VIEWS[TOC], docs, workers=1))
    inside, outside = "trap-long", "trap-short"
    with Workspace(tmp_path / "ws", toc) as ws:
        ws.add([inside])
        tools = RiseTools(None, ws, lines=structured)  # type: ignore[arg-type]  # read needs no index
        start, end, _ = entries((ws.files_dir / toc.relpath[inside]).read_text(encoding="utf-8"))[0]
        res = tools.read(toc.relpath[inside], start - 1, end - start + 1)
        assert not res.error and res.surfaced == (inside,)
        first = res.text.split("\n", 1)[0]
        assert first.split("\t", 1)[1] == structured.path(inside).read_text().split("\n")[start - 1], first
        refused = tools.read(toc.relpath[outside], 0, 5)  # its structured file exists, but search never brought it
        assert refused.error and "no such file in the workspace" in refused.text


def test_a_system_whose_tools_do_not_fit_its_view_is_refused():
    with pytest.raises(ConfigError, match="unknown view 'toc-only'"):
        System(name="x", label="x", prompt="agent_rise", docs="toc-only", tools="rise", help="x")
    with pytest.raises(ConfigError, match="points into the structured files, which retrieval tools do not open"):
        System(name="x", label="x", prompt="agent_rise", docs=TOC, tools="retrieval", help="x")
    with pytest.raises(ConfigError, match="snippet-toc tools cut documents along their TOC; view 'original'"):
        System(name="x", label="x", prompt="agent_rise", docs=ORIGINAL, tools="snippet-toc", help="x")
    assert {s.docs for s in SYSTEMS.values()} == {STRUCTURED, ORIGINAL, TOC}


def test_the_toc_view_of_a_docs_dir_never_structured_is_refused(built, tmp_path):
    docs, _, _ = built
    plain = tmp_path / "plain"
    shutil.copytree(docs / "corpus", plain / "corpus")
    shutil.copy(docs / "docmap.parquet", plain)
    assert view_docs(VIEWS[ORIGINAL], plain, workers=1) == plain  # a plain corpus is its own original text
    with pytest.raises(ConfigError, match=r"the toc view is made from a `rise-batch structure` output"):
        view_docs(VIEWS[TOC], plain, workers=1)


def run_cli(docs: Path, out: Path, index: Path, base_url: str, queries: Path) -> subprocess.CompletedProcess:
    argv = ["run", "--queries", str(queries), "--system", "rise-toc", "--index", str(index), "--docs", str(docs)]
    argv += ["--out", str(out), "--base-url", base_url, "--workers", "0", "--index-backend", "numpy"]
    argv += ["--tpm", "100000000", "--rpm", "1000000", "--no-progress"]
    cmd = [sys.executable, "-m", "rise_batch.cli", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=os.environ)


def test_rise_toc_end_to_end(agent_world, fake_server):
    """`rise-batch run --system rise-toc`: a search, a grep of the TOC-only files, one read of the entry naming the
    title, which shows the structured file's lines from that section's heading, and the right answer. Over a docs
    directory that was never structured, it is refused in one line (exit 2) before any model call."""
    out = run_dir("views-rise-toc")
    items = list(agent_world.titles.items())[:3]
    queries = write_queries(out / "q.jsonl", [title_query(d, t) for d, t in items])
    plain = out / "plain"
    shutil.copytree(agent_world.docs / "corpus", plain / "corpus")
    shutil.copy(agent_world.docs / "docmap.parquet", plain)
    refused = run_cli(plain, out / "refused", agent_world.index, fake_server.base_url, queries)
    assert refused.returncode == 2 and "the toc view is made from a `rise-batch structure` output" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert not (out / "refused" / "trajectories").exists()
    res = run_cli(agent_world.docs, out / "run", agent_world.index, fake_server.base_url, queries)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "run system=rise-toc" in res.stdout and "answered:3" in res.stdout, res.stdout
    structured, toc = DocStore(agent_world.docs), DocStore(agent_world.docs / "toc")
    trajectories = read_trajectories(out / "run")
    assert len(trajectories) == 3
    for qid, t in trajectories.items():
        assert [s["tool"] for s in t["steps"]] == ["search", "bash", "read"], t["steps"]
        _, grep, read = t["steps"]
        args = read["arguments"]
        assert args["path"] == toc.relpath[qid] and f"{args['path']}:" in grep["output"]
        start, end = args["offset"] + 1, args["offset"] + args["limit"]
        pointed = [(a, b) for a, b, _ in entries(toc.path(qid).read_text(encoding="utf-8"))]
        assert (start, end) in pointed  # the range of a TOC entry the grep found
        heading = structured.path(qid).read_text(encoding="utf-8").split("\n")[start - 1]
        assert heading.startswith("## ") and read["output"].split("\n", 1)[0] == f"{start:>6}\t{heading}"
        assert items[[d for d, _ in items].index(qid)][1].lower() in t["exact_answer"].lower()
        assert qid in t["surfaced_docids"] and qid in t["retrieved_docids"]
