"""The original-text twin (rise-bm25, retrieval-agent, dci) comes from the checkpoint, not from a guess.

A corpus may hold documents whose own text contains a TOC-like block: a page that quotes one, or a document
structured by an earlier run. Real structure runs (heuristic, and llm through the fake server over HTTP), then the
twin those systems read: every original must equal the corpus text byte for byte, and a structured file that no
longer matches its checkpoint row stops the build, naming the file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rise_batch.agent.originals import COMPLETE, OriginalMismatch, original_docs
from rise_batch.space.docstore import DocStore
from rise_batch.space.workspace import Workspace
from rise_batch.structure.render import render
from rise_batch.structuring.checkpoint import CheckpointStore
from rise_batch.types import Section
from tests.conftest import sample_rows, write_jsonl

# Short (too-short for both backends): a self-consistent TOC block that the old text-based stripping cut down to
# its last line.
SHORT_TRAP = (
    "## Table of Contents\n- L4\u20135: Notes \u2014 what follows\n=== DOCUMENT BODY ===\n## Notes\n"
    "The only real line of this page.\n"
)


def _long_trap() -> str:
    """A whole document that was structured before (by RISE or an earlier run) and is now itself corpus text."""
    text = sample_rows(8)[7]["text"]
    lines = text.split("\n")
    body = next(i for i, ln in enumerate(lines) if i > 0 and lines[i - 1].strip() == "---" and i > 2)
    return render(text, [Section("Opening", "how it starts", body + 1), Section("Rest", "", body + 4)])


def trap_corpus(path: Path) -> dict[str, str]:
    rows = sample_rows(5)
    rows.append({"docid": "trap-short", "text": SHORT_TRAP, "url": "https://x.org/a", "title": "Trap short"})
    rows.append({"docid": "trap-long", "text": _long_trap(), "url": "https://x.org/b", "title": "Trap long"})
    write_jsonl(path, rows)
    return {r["docid"]: r["text"] for r in rows}


def structure(corpus: Path, out: Path, backend: str, base_url: str = "") -> dict[str, str]:
    from rise_batch.config import load_structure_config
    from rise_batch.structuring.job import run_structure

    opts = {"corpus": str(corpus), "backend": backend, "workers": 0, "progress": False}
    if backend == "llm":
        opts |= {"llm_base_url": base_url, "llm_rpm": 100_000, "llm_tpm": 100_000_000}
    run_structure(load_structure_config(None, out=str(out), **opts))
    return {r.docid: r.outcome for r in CheckpointStore(out).read_rows()}


def assert_twin_is_the_corpus(out: Path, texts: dict[str, str]) -> None:
    twin = DocStore(original_docs(out, workers=1))
    assert len(twin) == len(texts)
    for docid, text in texts.items():
        assert twin.path(docid).read_text(encoding="utf-8") == text, docid
    # and what rise-bm25 sees through its workspace is that text too
    with Workspace(out.parent / f"ws-{out.name}", twin) as ws:
        ws.add(["trap-short", "trap-long"])
        assert (ws.files_dir / twin.relpath["trap-short"]).read_text(encoding="utf-8") == SHORT_TRAP


def test_heuristic_run_twin_keeps_documents_that_contain_a_toc_block(tmp_path):
    texts = trap_corpus(tmp_path / "c.jsonl")
    outcomes = structure(tmp_path / "c.jsonl", tmp_path / "heuristic", "heuristic")
    assert outcomes["trap-short"] == "too-short" and outcomes["trap-long"] == "toc"
    assert_twin_is_the_corpus(tmp_path / "heuristic", texts)


@pytest.mark.parametrize("faults", [{}, {"p_malformed": 1.0}], ids=["answers", "malformed"])
def test_llm_run_twin_keeps_documents_that_contain_a_toc_block(tmp_path, monkeypatch, faults):
    from rise_batch.fake_llm import FakeLLMServer

    monkeypatch.setenv("OPENAI_API_KEY", "")
    texts = trap_corpus(tmp_path / "c.jsonl")
    with FakeLLMServer(**faults) as server:
        outcomes = structure(tmp_path / "c.jsonl", tmp_path / "llm", "llm", server.base_url)
    assert outcomes["trap-short"] == "too-short"
    if faults:  # no TOC anywhere: the long trap's own block must survive as well
        assert outcomes["trap-long"] == "unparseable"
    assert_twin_is_the_corpus(tmp_path / "llm", texts)


def test_a_structured_file_that_does_not_match_its_checkpoint_stops_the_build(tmp_path):
    trap_corpus(tmp_path / "c.jsonl")
    out = tmp_path / "h"
    structure(tmp_path / "c.jsonl", out, "heuristic")
    store = DocStore(out)
    plain = store.path("trap-short")  # no TOC inserted: the file is the corpus text, edited here
    plain.write_text(SHORT_TRAP.replace("only", "ONLY"), encoding="utf-8")
    with pytest.raises(OriginalMismatch, match=r"corpus/.*docid 'trap-short'.*content hash.*rise-batch materialize"):
        original_docs(out, workers=1)
    assert not (out / "original" / COMPLETE).exists()
    plain.write_text(SHORT_TRAP, encoding="utf-8")
    with_toc = store.path("enwiki-12")  # an appended line makes its TOC inconsistent: no longer removable
    with_toc.write_text(with_toc.read_text(encoding="utf-8") + "an extra line\n", encoding="utf-8")
    with pytest.raises(OriginalMismatch, match=r"docid 'enwiki-12'.*says a TOC was inserted, the file has none"):
        original_docs(out, workers=1)
    # the remedy the message names restores a twin equal to the corpus
    from rise_batch.cli import main

    assert main(["materialize", str(out)]) == 0
    assert original_docs(out, workers=1) == out / "original"


def test_a_twin_built_by_the_old_rule_is_rebuilt(tmp_path):
    texts = trap_corpus(tmp_path / "c.jsonl")
    out = tmp_path / "h"
    structure(tmp_path / "c.jsonl", out, "heuristic")
    twin = original_docs(out, workers=1)
    rel = DocStore(out).relpath["trap-short"]
    (twin / "corpus" / rel).unlink()
    (twin / "corpus" / rel).write_text("The only real line of this page.\n")  # what the old rule wrote
    (twin / COMPLETE).write_text("")  # the old, empty marker
    assert_twin_is_the_corpus(out, texts)


def test_a_planted_lock_marker_or_twin_is_refused_or_rebuilt_never_followed(tmp_path):
    """DOCS/.original.lock a symlink to a missing path outside (root would create it: refused, nothing made); the
    twin's marker a FIFO (a read that never returns: the twin is rebuilt instead); the twin a symlink to a forged
    tree elsewhere (never used)."""
    import os
    import shutil
    import threading

    from rise_batch.agent.originals import LOCK, ORIGINAL_DIR
    from rise_batch.safe_read import RefusedFile

    trap_corpus(tmp_path / "c.jsonl")
    out = tmp_path / "h"
    structure(tmp_path / "c.jsonl", out, "heuristic")
    outside = tmp_path / "outside" / "made-by-root"
    outside.parent.mkdir()
    (out / LOCK).symlink_to(outside)
    with pytest.raises(RefusedFile, match=str(out / LOCK)):
        original_docs(out, workers=1)
    assert not outside.exists()
    (out / LOCK).unlink()
    twin = original_docs(out, workers=1)
    (twin / COMPLETE).unlink()
    os.mkfifo(twin / COMPLETE)
    box: dict = {}
    t = threading.Thread(target=lambda: box.setdefault("twin", original_docs(out, workers=1)), daemon=True)
    t.start()
    t.join(120)
    assert not t.is_alive(), "hung on a FIFO marker"
    assert (box["twin"] / COMPLETE).is_file()  # rebuilt
    forged = tmp_path / "forged"
    shutil.copytree(twin, forged)
    shutil.rmtree(twin)
    (out / ORIGINAL_DIR).symlink_to(forged)
    from rise_batch.agent.originals import BUILD_RULE
    from rise_batch.agent.view_files import complete

    assert not complete(out, out / ORIGINAL_DIR, BUILD_RULE)
