"""Tool behaviour the model sees: read's numbered ranges, bash through dispatch, argument coercion, schemas."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rise_batch.space import schemas
from rise_batch.space.docstore import DocStore
from rise_batch.space.fileview import PathRefused, open_inside, preview_of, read_numbered, snippet_line
from rise_batch.space.safe_open import Below
from rise_batch.space.tools import DciTools, RiseTools, ToolSet, coerce_queries, surfaced_in
from rise_batch.space.workspace import Workspace
from tests.space.conftest import TEST_LIMITS


@pytest.fixture
def rise(docs, ws_root, bwrap_ok):
    root, relpaths = docs
    ws = Workspace(ws_root / "ws", DocStore(root))
    ws.add(list(relpaths))
    yield RiseTools(None, ws, limits=TEST_LIMITS), relpaths  # type: ignore[arg-type]
    ws.close()


def test_read_numbers_lines_from_one_and_says_what_remains(rise):
    tools, relpaths = rise
    docid, rel = next(iter(relpaths.items()))
    res = tools.read(rel, offset=0, limit=5)
    lines = res.text.split("\n")
    assert lines[:2] == ["     1\t---", '     2\ttitle: "Anarchism"']
    assert lines[4] == "     5\t## Table of Contents"
    total = (tools.ws.files_dir / rel).read_text().count("\n")
    assert lines[5] == f"[lines 1-5 of {total}; {total - 5:,} more lines: continue with offset=5]"
    assert res.surfaced == (docid,) and not res.error


def test_toc_range_lands_on_its_heading(rise):
    tools, relpaths = rise
    rel = next(iter(relpaths.values()))
    toc = tools.read(rel, limit=8).text
    assert "- L9–12: Overview" in toc
    section = tools.read(rel, offset=8, limit=4).text.split("\n")
    assert section[0] == "     9\t## Overview" and section[-1].startswith("[lines 9-12 of")


def test_read_end_of_file_and_past_the_end(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("one\ntwo\nthree\n")
    assert read_numbered(f, 1, 10) == "     2\ttwo\n     3\tthree\n[lines 2-3 of 3; end of file]"
    assert read_numbered(f, 3, 10) == "[offset 3 is past the end: the file has 3 lines (valid offsets 0-2)]"
    f.write_text("no trailing newline")
    assert read_numbered(f, 0, 1) == "     1\tno trailing newline\n[lines 1-1 of 1; end of file]"
    f.write_text("")
    assert read_numbered(f) == "[empty file: 0 lines]"


def test_read_cuts_long_lines(tmp_path):
    f = tmp_path / "long.txt"
    f.write_text("x" * 2500 + "\nshort\n")
    first, second, _ = read_numbered(f).split("\n")
    assert first == "     1\t" + "x" * 2000 + " [... line cut: 500 more characters]"
    assert second == "     2\tshort"


def test_read_argument_errors_are_text(rise):
    tools, relpaths = rise
    rel = next(iter(relpaths.values()))
    assert tools.read(rel, offset=-1).error
    assert tools.read(rel, limit=0).error
    assert "integers" in tools.read(rel, offset="ten").text
    capped = tools.read(rel, limit=5000)
    assert capped.text.startswith("[limit capped at 2000 lines]") and not capped.error


def test_dispatch_parses_json_arguments_and_reports_mistakes(rise):
    tools, relpaths = rise
    rel = next(iter(relpaths.values()))
    ok = tools.call("read", json.dumps({"path": rel, "limit": 1}))
    assert ok.text.startswith("     1\t---")
    assert "unknown tool 'grep'" in tools.call("grep", "{}").text
    assert "not valid JSON" in tools.call("read", "{path: x}").text
    assert "bad arguments for read" in tools.call("read", {"file": rel}).text
    assert tools.call("bash", {"command": ""}).error


def test_bash_reports_surfaced_docids(rise):
    tools, relpaths = rise
    res = tools.call("bash", {"command": "rg -l 'political philosophy' | sort"})
    hits = [line for line in res.text.splitlines() if line.endswith(".txt")]
    assert hits and set(res.surfaced) == {d for d, r in relpaths.items() if r in hits}


def test_bash_cap_is_per_call_and_the_model_cannot_set_it(rise):
    """`timeout_s` (the time left) caps one call at min(the sandbox's own cap, timeout_s), at least 0.25 s; the
    sandbox's limits object is never replaced or changed, and a model's `timeout_s` argument is refused."""
    tools, _ = rise
    limits = tools.sandbox.limits
    assert "exceeded the 0.3 s time limit" in tools.call("bash", {"command": "sleep 5"}, timeout_s=0.3).text
    assert "exceeded the 0.25 s time limit" in tools.call("bash", {"command": "sleep 5"}, timeout_s=0.0).text  # floor
    assert "exceeded the 0.25 s time limit" in tools.call("bash", {"command": "sleep 5"}, timeout_s=-1.0).text
    cap = f"exceeded the {limits.timeout_s:g} s time limit"
    assert cap in tools.call("bash", {"command": "sleep 30"}, timeout_s=30.0).text
    refused = tools.call("bash", {"command": "true", "timeout_s": 600})
    assert refused.error and "unexpected keyword argument 'timeout_s'" in refused.text
    assert tools.call("read", {"path": "x"}, timeout_s=0.3).error  # tools without a cap ignore it
    assert tools.sandbox.limits is limits and limits == TEST_LIMITS


def test_surfaced_in_recognizes_rg_and_find_output():
    table = {"a.org/X.txt": "1", "b.org/Y.txt": "2"}
    text = "a.org/X.txt:12:some text\n./b.org/Y.txt\n/workspace/a.org/X.txt\nnot/a/doc.txt"
    assert surfaced_in(text, table.get) == ["1", "2"]


@pytest.mark.parametrize(
    "value,queries,note",
    [
        (["a b", "c"], ["a b", "c"], ""),
        ("lyon silk", ["lyon silk"], "single string"),
        ('["lyon", "silk"]', ["lyon", "silk"], "JSON-encoded string"),
        (["a", "", "  "], ["a"], "dropped 2 empty"),
        ("[not json", ["[not json"], "single string"),
        ({"q": 1}, [], "must be a list"),
    ],
)
def test_coerce_queries(value, queries, note):
    got, got_note = coerce_queries(value)
    assert got == queries and note in got_note and bool(got_note) == bool(note)


def test_preview_of_structured_and_plain():
    structured = '---\ntitle: "Lyon"\n---\n## Table of Contents\n- L6–9: Early — e\n- L10–12: Late\n- L13–14: X\n'
    assert preview_of(structured) == ("Lyon", ["L6–9: Early — e", "L10–12: Late"], "")
    plain = "---\ntitle: Paris\n---\nParis is  the\ncapital of France."
    assert preview_of(plain, lead_chars=22) == ("Paris", [], "Paris is the capital")
    assert preview_of("no frontmatter at all").lead == "no frontmatter at all"


def test_search_preview_snippet(docs):
    root, relpaths = docs
    first, second = list(relpaths.values())[:2]
    docs = Below(root / "corpus")
    line = snippet_line(docs, first)
    assert line.startswith("Anarchism | L9–12: Overview — What the term means | L13–294: History — ")
    assert len(line.split(" | L13–294: History — ", 1)[1]) > 10  # an empty proposal is described from its lines
    assert snippet_line(docs, second).startswith("Autism | Autism is a neurodevelopmental disorder")


def test_dci_tools_see_the_whole_corpus_read_only(docs, bwrap_ok, ws_root):
    root, relpaths = docs
    import shutil

    shutil.copytree(root, ws_root / "docs")  # a world-traversable copy, as a shared corpus would be
    dci = DciTools(DocStore(ws_root / "docs"), limits=TEST_LIMITS)
    res = dci.call("bash", {"command": "find . -name '*.txt' | wc -l; touch x 2>&1 | head -1"})
    assert res.text.startswith(f"{len(relpaths)}\n") and "Read-only file system" in res.text
    docid, rel = next(iter(relpaths.items()))
    assert dci.call("read", {"path": rel, "limit": 1}).surfaced == (docid,)
    assert [t["function"]["name"] for t in dci.schemas] == list(dci.tools) == ["bash", "read"]


def test_schemas_match_tools_and_convert(rise):
    tools, _ = rise
    assert [t["function"]["name"] for t in tools.schemas] == list(tools.tools) == ["search", "bash", "read"]
    for t in tools.schemas:
        params = t["function"]["parameters"]
        assert params["type"] == "object" and set(params["required"]) <= set(params["properties"])
        json.dumps(t)
    assert "top 1000" in tools.schemas[0]["function"]["description"]
    assert f"{TEST_LIMITS.timeout_s:g} s" in tools.schemas[1]["function"]["description"]  # the real cap, not 60
    flat = schemas.as_responses(tools.schemas)
    assert flat[0]["type"] == "function" and flat[0]["name"] == "search" and "parameters" in flat[0]
    assert issubclass(RiseTools, ToolSet)


def test_bash_rejects_unrunnable_commands(rise):
    tools, _ = rise
    assert "NUL" in tools.bash("echo a\x00b").text
    huge = tools.bash("echo " + "x" * 300_000)  # beyond the kernel's per-argument limit
    assert huge.error and "could not start" in huge.text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=st.lists(st.sampled_from([*"ab./~\\:\x00 ", "..", "en.wikipedia.org", "escdir", "Anarchism.txt"])).map("".join)
)
def test_open_inside_never_leaves_the_root(docs, path):
    root, _ = docs
    files = root / "corpus"
    link = files / "escdir"
    if not link.is_symlink():
        link.symlink_to("/")
    try:
        fd, rel = open_inside(Below(files), path)
    except PathRefused:
        return
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
        assert os.path.commonpath([os.path.realpath(files), real]) == os.path.realpath(files)
        assert os.path.isfile(real) and not os.path.islink(files / rel) and not rel.startswith("/")
        assert ".." not in rel.split("/") and not rel.startswith("escdir")
    finally:
        os.close(fd)


def test_bash_result_times_the_sandbox_apart_from_the_command(rise):
    """A bash call's phases separate the sandbox's part (the lock, starting the call inside the long-lived
    bubblewrap) from the command's run, so the overhead can be measured under load (issue 14)."""
    tools, _ = rise
    quick, slow = tools.call("bash", {"command": "true"}), tools.call("bash", {"command": "sleep 0.3"})
    assert set(quick.phases) == set(slow.phases) == {"lock_ms", "start_ms", "exec_ms"}
    assert slow.phases["exec_ms"] >= 290 and quick.phases["exec_ms"] < 290
    assert all(v >= 0 for v in quick.phases.values())
