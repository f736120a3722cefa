"""RISE search and the retrieval-agent baseline over a real BM25 index of the demo docs; the workspace CLI."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from rise_batch.space.docstore import DocStore
from rise_batch.space.tools import RetrievalTools, search_into
from rise_batch.space.workspace import Workspace
from tests.conftest import sample_rows, write_jsonl
from tests.space.conftest import make_docs


@pytest.fixture(scope="session")
def indexed(tmp_path_factory) -> tuple[Path, dict[str, str], object]:
    from rise_batch.index import build_index, load_index

    root = tmp_path_factory.mktemp("search")
    docs, relpaths = make_docs(root / "docs")
    write_jsonl(root / "corpus.jsonl", sample_rows(len(relpaths)))
    build_index(root / "corpus.jsonl", root / "index", workers=1)
    return docs, relpaths, load_index(root / "index", backend="numpy")  # no numba JIT wait in tests


@pytest.fixture
def ws(indexed, tmp_path):
    docs, _, _ = indexed
    with Workspace(tmp_path / "ws", DocStore(docs)) as w:
        yield w


QUERIES = ["anarchism political philosophy", "autism social interaction", "albedo reflected sunlight"]


def test_workspace_is_the_union_of_sub_query_top_k(indexed, ws):
    _, relpaths, index = indexed
    res = search_into(index, ws, QUERIES, k=4)
    hits = index.search(QUERIES, 4)
    union = {d for h in hits for d in h.docids}
    assert set(ws.docids()) == union == set(res.retrieved)
    files = {p.relative_to(ws.files_dir).as_posix() for p in ws.files_dir.rglob("*.txt")}
    assert files == {relpaths[d] for d in union}  # corpus-relative paths preserved
    counts = [tuple(map(int, m)) for m in re.findall(r"-- (\d+) matched, (\d+) new", res.text)]
    seen: set[str] = set()
    for (matched, new), h in zip(counts, hits, strict=True):
        assert matched == len(h.docids) and new == len(set(h.docids) - seen)
        seen |= set(h.docids)
    assert {a.call for a in ws.arrivals.values()} == {0}  # one search call, whatever its number of sub-queries


def test_search_grows_monotonically_across_calls(indexed, ws):
    _, _, index = indexed
    search_into(index, ws, QUERIES[:1], k=3)
    first = set(ws.docids())
    res = search_into(index, ws, QUERIES[:2], k=3)
    assert first <= set(ws.docids()) and set(res.retrieved) == set(ws.docids()) - first
    assert f"Workspace: {len(ws):,} documents (+{len(ws) - len(first):,} this call)" in res.text
    again = search_into(index, ws, QUERIES[:2], k=3)
    assert again.retrieved == () and "(+0 this call)" in again.text


def test_preview_lists_rank_score_path_and_toc(indexed, ws):
    _, relpaths, index = indexed
    res = search_into(index, ws, ["anarchism"], k=1000, preview=10)
    lines = res.text.split("\n")
    top = index.search(["anarchism"], 10)[0]
    first = lines.index(next(x for x in lines if x.startswith('Query 1: "anarchism"')))
    assert lines[first + 1] == f"   1. [{top.scores[0]:.2f}] {relpaths[top.docids[0]]}"
    assert lines[first + 2].startswith("      Anarchism | L9–12: Overview — What the term means | L13–294: History — ")
    assert sum(1 for x in lines if re.match(r"^ +\d+\. \[", x)) == min(10, len(top.docids))
    assert set(res.surfaced) == set(top.docids[:10])


def test_search_accepts_the_forms_models_send(indexed, ws):
    _, _, index = indexed
    as_json = search_into(index, ws, '["autism", "albedo"]', k=2)
    assert "Note: `queries` arrived as a JSON-encoded string" in as_json.text and "Query 2:" in as_json.text
    single = search_into(index, ws, "autism", k=2)
    assert "treated it as a list of one query" in single.text
    assert search_into(index, ws, [], k=2).error
    assert search_into(index, ws, ["   "], k=2).error


def test_rise_search_tool_takes_a_query_key_too(indexed, ws_root, bwrap_ok):
    from rise_batch.space.tools import RiseTools

    docs, _, index = indexed
    with Workspace(ws_root / "alias", DocStore(docs)) as w:
        tools = RiseTools(index, w, k=3)
        res = tools.call("search", {"query": "autism"})
        assert res.text.startswith("Note: read `query` as `queries`.") and len(w) == len(res.retrieved) > 0
        assert tools.call("search", {}).error


def test_retrieval_agent_tools(indexed):
    docs, relpaths, index = indexed
    tools = RetrievalTools(index, DocStore(docs))
    res = tools.call("search", {"query": "anarchism political philosophy"})
    top = index.search(["anarchism political philosophy"], 5)[0]
    assert res.surfaced == tuple(top.docids) and len(top.docids) == 5
    blocks = res.text.split("\n[")[1:]
    assert len(blocks) == 5 and blocks[0].startswith(f"1] docid: {top.docids[0]}  score: {top.scores[0]:.2f}")
    assert all(len(b) <= 512 * 4 + 100 for b in blocks)  # ~512-token snippets
    assert "title:" not in blocks[0]  # the snippet is body text, not frontmatter
    doc = tools.call("get_document", {"docid": top.docids[0]})
    assert doc.text == f"docid: {top.docids[0]}\n" + (docs / "corpus" / relpaths[top.docids[0]]).read_text()
    assert tools.call("get_document", {"docid": "nope"}).error
    assert [t["function"]["name"] for t in tools.schemas] == ["search", "get_document"]
    assert set(res.retrieved) == set(top.docids)
    assert tools.call("search", {"query": "anarchism political philosophy"}).retrieved == ()  # only new docids


def test_workspace_cli_walk(indexed, ws_root, capsys, bwrap_ok):
    from rise_batch.cli import main

    docs, relpaths, _ = indexed
    ws = ws_root / "walk"
    index_dir = Path(docs).parent / "index"
    assert (
        main(
            [
                "workspace",
                "search",
                "--index",
                str(index_dir),
                "--docs",
                str(docs),
                "--workspace",
                str(ws),
                "-k",
                "5",
                "anarchism",
                "autism",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert 'Query 1: "anarchism"' in out and 'Query 2: "autism"' in out
    assert main(["workspace", "bash", str(ws), "rg -l 'political philosophy' | sort"]) == 0
    out = capsys.readouterr().out
    assert relpaths["enwiki-12"] in out and out.rstrip().endswith("[exit code: 0]")
    assert main(["workspace", "read", str(ws), relpaths["enwiki-12"], "--offset", "4", "--limit", "1"]) == 0
    assert capsys.readouterr().out.startswith("     5\t## Table of Contents\n[lines 5-5 of")
    assert main(["workspace", "read", str(ws), "../x"]) == 1
    assert "'..' is not allowed" in capsys.readouterr().err
    assert main(["workspace", "info", str(ws)]) == 0
    assert "from 1 search calls" in capsys.readouterr().out
    assert main(["workspace", "bash", str(ws_root / "nope"), "ls"]) == 2


def test_sample_walk_for_the_demo(indexed, ws_root, capsys, bwrap_ok):
    from rise_batch.commands.workspace import sample_walk

    docs, relpaths, _ = indexed
    assert (
        sample_walk(Path(docs).parent / "index", docs, ws_root / "demo", ["anarchism"], "rg -l anarch | head -3") == 0
    )
    out = capsys.readouterr().out
    assert 'Query 1: "anarchism"' in out and relpaths["enwiki-12"] in out and out.rstrip().endswith("[exit code: 0]")


def _resident_pages(path: Path) -> int:
    out = subprocess.run(["fincore", "--noheadings", "--output", "PAGES", str(path)], capture_output=True, text=True)
    return int(out.stdout.split()[0])


@pytest.mark.skipif(shutil.which("fincore") is None, reason="needs util-linux fincore to see the page cache")
def test_search_starts_reading_the_previews_files_before_it_links(indexed, ws, tmp_path):
    """At 1M documents most corpus files are not in the page cache, and the previews read theirs one by one
    (issue 14). search_into asks the kernel for the preview files' heads before linking: a preview file dropped
    from the page cache is read back in by the prefetch alone (the test reads nothing itself)."""
    from rise_batch.space.fileview import SNIPPET_HEAD_BYTES, prefetch_heads
    from rise_batch.space.safe_open import Below

    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * (4 * SNIPPET_HEAD_BYTES))
    fd = os.open(big, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    if _resident_pages(big) != 0:
        pytest.skip("this file system keeps dropped pages (e.g. tmpfs)")
    prefetch_heads(Below(tmp_path), [big.name])
    deadline = time.monotonic() + 60  # the read-ahead is asynchronous; only a hang takes a minute
    while _resident_pages(big) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert 0 < _resident_pages(big) * os.sysconf("SC_PAGE_SIZE") <= 2 * SNIPPET_HEAD_BYTES  # the head, not all

    res = search_into(indexed[2], ws, ["anarchism"], k=5)
    assert res.phases and res.phases["prefetch_ms"] >= 0 and "1. [" in res.text
