"""`rise-batch index` end to end: builds, prints counts and the top hits of --query, refuses to clobber."""

from __future__ import annotations

import json

from rise_batch.cli import main


def test_index_command_builds_and_searches(tmp_path, sample_path, capsys):
    out = tmp_path / "idx"
    argv = ["index", "--corpus", str(sample_path), "--out", str(out), "--workers", "2", "--shard-docs", "30"]
    assert main([*argv, "--query", "anarchism political philosophy"]) == 0
    printed = capsys.readouterr().out
    assert "index docs=100 " in printed
    top = printed.split("query: anarchism political philosophy\n")[1].split("\n")[0].split()
    assert top[1] == "enwiki-12" and float(top[0]) > 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["counts"]["n_docs"] == 100 and meta["build"]["runner"] == "process"


def test_index_command_refuses_existing_dir_without_overwrite(tmp_path, sample_path, capsys):
    out = tmp_path / "idx"
    out.mkdir()
    (out / "something").write_text("x")
    argv = ["index", "--corpus", str(sample_path), "--out", str(out), "--workers", "1"]
    assert main(argv) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 0
    assert not (out / "something").exists()


def test_bad_corpus_is_a_clean_error(tmp_path, capsys):
    (tmp_path / "c.jsonl").write_text('{"docid": "a", "text": "fine"}\n{"docid": "b", "text": ""}\n')
    assert main(["index", "--corpus", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "i")]) == 2
    assert "row 1: empty text" in capsys.readouterr().err
    assert not (tmp_path / "i").exists()
