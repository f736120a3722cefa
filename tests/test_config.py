from __future__ import annotations

import pytest

from rise_batch.config import ConfigError, load_structure_config, run_hash


def test_flags_override_yaml(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("structure:\n  corpus: a.jsonl\n  out: o\n  shard_docs: 50\n  llm:\n    rpm: 100\n")
    cfg = load_structure_config(p, shard_docs=7, llm_tpm=999)
    assert (cfg.corpus, cfg.shard_docs, cfg.llm.rpm, cfg.llm.tpm) == ("a.jsonl", 7, 100, 999)


@pytest.mark.parametrize(
    "over, message",
    [
        ({"backend": "gpt"}, "unknown backend 'gpt'"),
        ({"llm_rpm": 0}, "llm.rpm must be a positive integer"),
        ({"llm_rpm": -5}, "llm.rpm must be a positive integer"),
        ({"shard_docs": 0}, "shard_docs must be >= 1"),
        ({"on_bad_row": "ignore"}, "on_bad_row must be"),
        ({"corpus": ""}, "corpus is required"),
    ],
)
def test_bad_values_fail_fast(over, message):
    base = {"corpus": "c.jsonl", "out": "o"} | over
    with pytest.raises(ConfigError, match=message):
        load_structure_config(None, **base)


def test_typos_and_wrong_types_name_the_key(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("corpus: a\nout: o\nllm:\n  rmp: 5\n")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['rmp'\] in llm"):
        load_structure_config(p)
    p.write_text("corpus: a\nout: o\nllm:\n  rpm: fast\n")
    with pytest.raises(ConfigError, match="llm.rpm must be int"):
        load_structure_config(p)


def test_llm_backend_needs_a_key_unless_local(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match=r"needs an API key: set \$OPENAI_API_KEY"):
        load_structure_config(None, corpus="c", out="o", backend="llm")
    cfg = load_structure_config(None, corpus="c", out="o", backend="llm", llm_base_url="http://127.0.0.1:9/v1")
    assert cfg.llm.api_key() == "local-no-key"
    monkeypatch.setenv("MY_KEY", "sk-x")
    cfg = load_structure_config(None, corpus="c", out="o", backend="llm", llm_api_key_env="MY_KEY")
    assert cfg.llm.api_key() == "sk-x"


def test_run_hash_tracks_output_not_logistics():
    a = load_structure_config(None, corpus="c", out="o", backend="llm", llm_base_url="http://localhost:1/v1")
    b = load_structure_config(
        None, corpus="c2", out="o2", backend="llm", llm_base_url="http://localhost:1/v1", llm_rpm=7, workers=9
    )
    c = load_structure_config(
        None, corpus="c", out="o", backend="llm", llm_base_url="http://localhost:1/v1", llm_model="gpt-5.4-mini"
    )
    assert run_hash(a, "prompt") == run_hash(b, "prompt")
    assert run_hash(a, "prompt") != run_hash(a, "prompt v2")
    assert run_hash(a, "prompt") != run_hash(c, "prompt")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "link-to-dev-zero", "section-a-list", "section-a-number"])
@pytest.mark.parametrize("command", ["run", "structure"])
def test_a_config_that_is_not_a_file_of_settings_is_refused_in_one_line(tmp_path, kind, command):
    """`--config` a FIFO (hung for good before), /dev/zero (MemoryError after 2.6 GB), a link to it, or a section
    that is not a mapping (`run: [1]`: a TypeError traceback): exit 2, one line naming the file."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    path = tmp_path / "config.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path = "/dev/zero"
    elif kind == "link-to-dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.write_text(f"{command}: [1]\n" if kind == "section-a-list" else f"{command}: 3\n")
    rest = ["--queries", "q", "--index", "i", "--docs", "d"] if command == "run" else ["--corpus", "c"]
    cmd = [sys.executable, "-m", "rise_batch.cli", command, "--config", str(path), *rest, "--out", str(tmp_path / "o")]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and str(path) in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
