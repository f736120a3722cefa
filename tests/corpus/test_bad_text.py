"""Bad text is caught at the scan, before anything is paid (issue 12, section 4).

Real files only: JSONL with lone-surrogate escapes, a truncated and a non-gzip `.gz`, a truncated Parquet file and
id/contents JSONL, through the scan, the structure job (heuristic, and llm against the fake server over HTTP) and
real `rise-batch structure|index|plan` subprocesses.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rise_batch.corpus.readers import CorpusError, iter_docs
from rise_batch.corpus.scan import scan_corpus, write_bad_rows
from tests.cli import cli
from tests.conftest import sample_rows, write_jsonl, write_parquet

GOOD = sample_rows(4)
# json.dumps would escape a real surrogate the same way: "\ud800" with no low half is valid JSON, invalid UTF-8
BAD_LINES = {
    "text": '{"docid": "bad-text", "text": "Lone \\ud800 surrogate.\\n\\nA body long enough to be structured."}',
    "docid": '{"docid": "bad\\udc80id", "text": "A body.\\n\\nLong enough to be structured by anyone."}',
    "url": '{"docid": "bad-url", "text": "A body.\\n\\nMore.", "url": "https://ex.org/\\ud83d"}',
    "title": '{"docid": "bad-title", "text": "A body.\\n\\nMore.", "title": "T\\udfff"}',
}


def corpus_with(path: Path, field: str) -> Path:
    """The four good rows with the bad row of `field` as row 2."""
    lines = [json.dumps(r) for r in GOOD]
    lines.insert(2, BAD_LINES[field])
    path.write_text("\n".join(lines) + "\n")
    return path


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 2 and a single `rise-batch <cmd>: error: ...` line holding every needle; no traceback."""
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and ": error: " in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


# -- lone surrogates ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["text", "docid", "url", "title"])
def test_unencodable_strings_are_bad_rows_at_the_scan(tmp_path, field):
    path = corpus_with(tmp_path / "c.jsonl", field)
    with pytest.raises(CorpusError, match=rf"c\.jsonl: row 2: lone surrogate in {field} \(U\+D[89A-F][0-9A-F]{{2}}"):
        scan_corpus(path)
    with pytest.raises(CorpusError, match=rf"row 2: lone surrogate in {field}"):
        list(iter_docs(path))
    plan = scan_corpus(path, on_bad_row="skip")
    assert plan.n_docs == 4 and [b.row for b in plan.bad_rows] == [2]
    # the refused row is recorded: its docid must survive a Parquet write (escaped, never raising)
    write_bad_rows(plan.bad_rows, tmp_path / "bad.parquet")
    (rec,) = pq.read_table(tmp_path / "bad.parquet").to_pylist()
    assert rec["row"] == 2 and f"lone surrogate in {field}" in rec["reason"]
    assert rec["docid"].encode("utf-8")  # storable and printable
    if field == "docid":
        assert rec["docid"] == "bad\\udc80id"


@pytest.mark.parametrize("field", ["text", "docid"])
def test_structure_heuristic_skips_the_row_and_reruns(tmp_path, field):
    from rise_batch.config import load_structure_config
    from rise_batch.structuring.job import run_structure

    path = corpus_with(tmp_path / "c.jsonl", field)
    proc = cli("structure", "--corpus", path, "--out", tmp_path / "err", "--no-progress", cwd=tmp_path)
    assert_one_line_error(proc, "c.jsonl: row 2: lone surrogate in", "--on-bad-row skip")
    cfg = load_structure_config(None, corpus=str(path), out=str(tmp_path / "o"), on_bad_row="skip", progress=False)
    for _ in range(2):  # the re-run resumes instead of crashing
        stats = run_structure(cfg)
        assert stats["docs_total"] == 4
    bad = pq.read_table(tmp_path / "o" / "bad_rows.parquet").to_pylist()
    assert [b["row"] for b in bad] == [2] and "lone surrogate" in bad[0]["reason"]


def test_structure_llm_pays_nothing_for_the_bad_row(tmp_path, monkeypatch):
    from rise_batch.config import load_structure_config
    from rise_batch.fake_llm import FakeLLMServer
    from rise_batch.structuring.checkpoint import CheckpointStore
    from rise_batch.structuring.job import run_structure

    monkeypatch.setenv("OPENAI_API_KEY", "")
    path = corpus_with(tmp_path / "c.jsonl", "text")
    with FakeLLMServer() as server:
        base = {"corpus": str(path), "backend": "llm", "workers": 0, "progress": False}
        base |= {"llm_base_url": server.base_url, "llm_rpm": 100_000, "llm_tpm": 100_000_000}
        with pytest.raises(CorpusError, match=r"row 2: lone surrogate in text"):
            run_structure(load_structure_config(None, out=str(tmp_path / "err"), **base))
        assert server.stats()["requests"] == 0  # refused before any request
        cfg = load_structure_config(None, out=str(tmp_path / "o"), on_bad_row="skip", **base)
        stats = run_structure(cfg)
        paid = server.stats()["requests"]
        rows = list(CheckpointStore(tmp_path / "o").read_rows())
        assert sorted(r.docid for r in rows) == sorted(r["docid"] for r in GOOD)
        assert paid == stats["llm_calls"] == sum(r.attempts for r in rows) >= 4  # every request was a good doc's
        again = run_structure(cfg)  # the re-run neither crashes nor pays again
        assert server.stats()["requests"] == paid and again["docs_total"] == 4


# -- broken files --------------------------------------------------------------------------------------------------
def broken_files(tmp_path: Path) -> dict[str, Path]:
    data = "".join(json.dumps(r) + "\n" for r in sample_rows(20)).encode()
    packed = gzip.compress(data)
    (tmp_path / "truncated.jsonl.gz").write_bytes(packed[: len(packed) // 2])
    (tmp_path / "plain.jsonl.gz").write_bytes(data)
    whole = write_parquet(tmp_path / "whole.parquet", sample_rows(20)).read_bytes()
    (tmp_path / "truncated.parquet").write_bytes(whole[: len(whole) // 2])
    return {name: tmp_path / name for name in ("truncated.jsonl.gz", "plain.jsonl.gz", "truncated.parquet")}


@pytest.mark.parametrize("name", ["truncated.jsonl.gz", "plain.jsonl.gz", "truncated.parquet"])
def test_broken_files_give_one_line_naming_the_file(tmp_path, name):
    path = broken_files(tmp_path)[name]
    with pytest.raises(CorpusError, match=name.replace(".", r"\.")):
        scan_corpus(path)
    commands = {
        "structure": ["structure", "--corpus", path, "--out", tmp_path / "s", "--no-progress"],
        "index": ["index", "--corpus", path, "--out", tmp_path / "i", "--workers", "1"],
        "plan": ["plan", "--corpus", path, "--sample", "5"],
    }
    for args in commands.values():
        assert_one_line_error(cli(*args, cwd=tmp_path), str(path))


# -- column names ------------------------------------------------------------------------------------------------
def id_contents(tmp_path: Path, fmt: str) -> Path:
    rows = [{"id": r["docid"], "contents": r["text"]} for r in GOOD]
    if fmt == "parquet":
        return write_parquet(tmp_path / "ic.parquet", rows)
    return write_jsonl(tmp_path / "ic.jsonl", rows)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_other_column_names_are_named_and_mappable(tmp_path, fmt):
    path = id_contents(tmp_path, fmt)
    told = "no docid column; the rows have [id, contents]"
    with pytest.raises(CorpusError, match=re.escape(told)):
        scan_corpus(path)
    with pytest.raises(CorpusError, match=re.escape(told)):  # skipping every row still says why
        scan_corpus(path, on_bad_row="skip")
    docs = list(iter_docs(path, columns="docid=id,text=contents"))
    assert [(d.docid, d.text) for d in docs] == [(r["docid"], r["text"]) for r in GOOD]
    done = {}
    for cmd in (
        ["structure", "--out", tmp_path / "s", "--no-progress"],
        ["index", "--out", tmp_path / "i", "--workers", "1"],
        ["plan", "--sample", "5"],
    ):
        assert_one_line_error(cli(*cmd, "--corpus", path, cwd=tmp_path), told, "--columns")
        done[cmd[0]] = proc = cli(*cmd, "--corpus", path, "--columns", "docid=id,text=contents", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    assert "docs_total=4" in done["structure"].stdout and "index docs=4" in done["index"].stdout
    assert "documents" in done["plan"].stdout.lower()
    assert json.loads((tmp_path / "i" / "docids.json").read_text()) == [r["docid"] for r in GOOD]


def test_column_mapping_is_validated_and_hashed_only_when_it_changes_what_is_read(tmp_path):
    from rise_batch.config import ConfigError, load_structure_config, run_hash

    base = {"corpus": "c.jsonl", "out": "o"}
    plain = run_hash(load_structure_config(None, **base), "")
    assert run_hash(load_structure_config(None, **base, columns="docid=docid"), "") == plain
    assert run_hash(load_structure_config(None, **base, columns="docid=id,text=contents"), "") != plain
    for bad in ("docid", "body=text", "docid=,text=x", "docid=a,text=a", "docid=a,docid=b"):
        with pytest.raises(ConfigError, match="columns"):
            load_structure_config(None, **base, columns=bad)
    (tmp_path / "cfg.yaml").write_text("structure:\n  columns: docid=id,text=contents\n")
    cfg = load_structure_config(tmp_path / "cfg.yaml", **base)
    assert cfg.columns == "docid=id,text=contents"


def test_a_broken_file_read_by_a_ray_task_is_the_same_one_line_error(tmp_path, ray_local):
    """`index --ray` reads shards in Ray tasks: the error must not come back as a remote traceback."""
    from rise_batch.index import build_index
    from rise_batch.index.shards import RayShardRunner

    path = broken_files(tmp_path)["truncated.jsonl.gz"]
    with pytest.raises(CorpusError) as err:
        build_index(path, tmp_path / "i", runner=RayShardRunner())
    assert str(err.value).startswith(f"{path}: truncated or corrupt gzip data") and "\n" not in str(err.value)
