"""Run configuration: YAML + flags, validation at the edge, and what the config hash covers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rise_batch.agent.run_config import config_hash, load_run_config
from rise_batch.config import ConfigError

JOBS = Path(__file__).resolve().parents[2] / "jobs"
BASE = dict(queries="q.jsonl", out="o", docs="d", index="i", llm_base_url="http://127.0.0.1:9/v1")


def test_example_configs_load():
    cfg = load_run_config(JOBS / "run_rise_fake.yaml")
    assert cfg.system == "rise" and cfg.workers == 2 and cfg.llm.model == "gpt-5.4-mini"
    assert cfg.llm.timeout_s == 600.0  # agent defaults survive a partial llm: section
    over = load_run_config(JOBS / "run_rise_fake.yaml", system="dci", llm_model="gpt-5.4-nano")
    assert over.system == "dci" and over.llm.model == "gpt-5.4-nano" and over.budget().max_calls == 300


def test_bad_configs_are_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("run:\n  queries: q\n  sistem: rise\n")
    with pytest.raises(ConfigError, match="sistem"):
        load_run_config(bad)
    with pytest.raises(ConfigError, match="unknown system"):
        load_run_config(None, **{**BASE, "system": "rise-2"})
    with pytest.raises(ConfigError, match="index"):
        load_run_config(None, **{**BASE, "index": None, "system": "retrieval-agent"})
    assert load_run_config(None, **{**BASE, "index": None, "system": "dci"}).index is None
    with pytest.raises(ConfigError, match="wall_clock_s"):
        load_run_config(None, **BASE, wall_clock_s=0.0)


def test_budgets_and_per_worker_llm_concurrency():
    cfg = load_run_config(None, **BASE, concurrency=64, workers=4)
    assert cfg.llm.concurrency == 16 and cfg.budget().max_calls == 100 and cfg.budget().wall_clock_s == 3600
    assert load_run_config(None, **BASE, concurrency=64, llm_concurrency=5).llm.concurrency == 5
    assert load_run_config(None, **BASE, max_calls=7, wall_clock_s=9.5).budget() == (
        load_run_config(None, **BASE).budget().__class__(max_calls=7, wall_clock_s=9.5, call_timeout_s=600.0)
    )


def test_config_hash_covers_what_changes_a_trajectory():
    base = config_hash(load_run_config(None, **BASE), "prompt")
    same = [dict(workers=7, concurrency=3, llm_rpm=5, ray_address="x", out="elsewhere", docs="moved")]
    for over in same:
        assert config_hash(load_run_config(None, **{**BASE, **over}), "prompt") == base
    for over in [dict(system="rise-bm25"), dict(llm_model="gpt-5.4"), dict(k=100), dict(max_calls=5),
                 dict(api="responses"), dict(llm_reasoning_effort="high"), dict(bash_timeout_s=5.0)]:  # fmt: skip
        assert config_hash(load_run_config(None, **{**BASE, **over}), "prompt") != base, over
    assert config_hash(load_run_config(None, **BASE), "another prompt") != base


@pytest.mark.parametrize(
    "key,value",
    [
        ("bash_timeout_s", ".nan"),
        ("bash_timeout_s", ".inf"),
        ("bash_timeout_s", "-1"),
        ("bash_max_output_chars", "-5"),
        ("bash_max_output_chars", ".nan"),
        ("bash_nice", "20"),
        ("bash_nice", "-1"),
        ("bash_nice", "2.5"),
    ],
)
def test_bad_sandbox_limits_in_a_run_config_are_refused(tmp_path, key, value):
    """YAML spells NaN and infinity `.nan` and `.inf`; they must not pass as limits (NaN <= 0 is false)."""
    cfg = tmp_path / "run.yaml"
    plain = {k: v for k, v in BASE.items() if not k.startswith("llm_")}
    lines = [f"  {k}: {v}" for k, v in {**plain, key: value}.items()] + [
        f"  llm: {{base_url: '{BASE['llm_base_url']}'}}"
    ]
    cfg.write_text("run:\n" + "\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=rf"^{key} must be"):
        load_run_config(cfg)


@pytest.mark.parametrize(
    "line,key",
    [
        ("wall_clock_s: .nan", "wall_clock_s"),  # today's main: every query stopped at once as wall_clock
        ("wall_clock_s: .inf", "wall_clock_s"),
        ("grace_s: .nan", "grace_s"),
        ("kill_grace_s: .inf", "kill_grace_s"),
        ("worker_cpus: .nan", "worker_cpus"),
        ("worker_cpus: .inf", "worker_cpus"),
        ("worker_cpus: -1", "worker_cpus"),
        ("llm: {timeout_s: .nan}", "llm.timeout_s"),
        ("llm: {timeout_s: .inf}", "llm.timeout_s"),
        ("llm: [1, 2]", "llm"),
        ("llm: 7", "llm"),
        ("k: .inf", "k"),
        ("workers: two", "workers"),
    ],
)
def test_non_finite_and_wrong_typed_values_are_refused_with_the_key(tmp_path, line, key):
    """One check in the shared section reader, for every float key of every config, not one per key."""
    cfg = tmp_path / "run.yaml"
    plain = {k: v for k, v in BASE.items() if not k.startswith("llm_")}
    cfg.write_text("run:\n" + "\n".join([f"  {k}: {v}" for k, v in plain.items()] + [f"  {line}"]) + "\n")
    over = {"llm_base_url": BASE["llm_base_url"]} if not line.startswith("llm:") else {}
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)} must be") as e:
        load_run_config(cfg, **over)
    assert "\n" not in str(e.value)


def test_the_structure_config_refuses_them_too(tmp_path):
    from rise_batch.config import load_structure_config

    for line, key in [("flush_seconds: .inf", "flush_seconds"), ("max_cost_usd: .nan", "max_cost_usd"),
                      ("llm: [1, 2]", "llm"), ("batch: {poll_s: .nan}", "batch.poll_s")]:  # fmt: skip
        cfg = tmp_path / "s.yaml"
        cfg.write_text(f"structure:\n  corpus: c.jsonl\n  out: o\n  {line}\n")
        with pytest.raises(ConfigError, match=rf"^{re.escape(key)} must be"):
            load_structure_config(cfg, llm_rpm=10)
