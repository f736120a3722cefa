"""Sweep configs: grid expansion, per-cell RunConfigs, validation messages, and the example YAMLs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from rise_batch.config import ConfigError
from rise_batch.eval.sweep import cell_run_config, corpus_size, expand, load_sweep_config, parse_sweep
from tests.conftest import write_parquet

ROOT = Path(__file__).resolve().parents[2]


def sweep(**over: Any) -> dict[str, Any]:
    base = {
        "name": "s",
        "out": "/runs/s",
        "queries": "/q.jsonl",
        "systems": ["rise", "dci"],
        "models": ["gpt-5.4-nano", "gpt-5.4-mini"],
        "k": [100, 1000],
        "repeats": 2,
        "corpora": [{"name": "small", "docs": "/d/small", "index": "/d/small/index", "size": 10}],
        "run": {"workers": 2, "llm": {"base_url": "http://127.0.0.1:1/v1", "rpm": 100}},
        "model_llm": {"gpt-5.4-mini": {"reasoning_effort": "low"}},
    }
    return {"sweep": base | over}


def test_grid_expansion_and_dci_has_no_k() -> None:
    cfg = parse_sweep(sweep())
    cells = expand(cfg)
    # per model: rise x 2 K x 2 repeats + dci x 2 repeats = 6; two models
    assert len(cells) == 12 and len({c.cell_id for c in cells}) == 12
    assert {c.k for c in cells if c.system == "dci"} == {None}
    assert [c.cell_id for c in cells[:3]] == [
        "rise__gpt-5.4-nano__k100__small",
        "rise__gpt-5.4-nano__k100__small__r1",
        "rise__gpt-5.4-nano__k1000__small",
    ]
    assert cells[4].cell_id == "dci__gpt-5.4-nano__all__small"
    assert cells[0].labels() == {
        "cell": "rise__gpt-5.4-nano__k100__small",
        "system": "rise",
        "model": "gpt-5.4-nano",
        "k": 100,
        "corpus": "small",
        "corpus_docs": 10,
        "repeat": 0,
    }


def test_cell_run_config_merges_shared_and_per_model_settings() -> None:
    cfg = parse_sweep(sweep())
    cells = expand(cfg)
    mini = next(c for c in cells if c.model == "gpt-5.4-mini" and c.system == "rise" and c.k == 1000)
    run = cell_run_config(cfg, mini)
    assert (run.system, run.k, run.workers, run.docs, run.index) == ("rise", 1000, 2, "/d/small", "/d/small/index")
    assert run.out == "/runs/s/cells/rise__gpt-5.4-mini__k1000__small"
    assert (run.llm.model, run.llm.rpm, run.llm.reasoning_effort) == ("gpt-5.4-mini", 100, "low")
    assert run.llm.timeout_s == 600.0  # the agent defaults still apply
    nano = cell_run_config(cfg, cells[0])
    assert nano.llm.reasoning_effort is None and nano.k == 100


def test_each_cell_gets_its_own_workspace_root_below_the_sweeps() -> None:
    """A run claims its workspace root for itself (agent/workspace_root.py), so cells sharing one would refuse."""
    cfg = parse_sweep(
        sweep(run={"workers": 2, "workspace_root": "/scratch/ws", "llm": {"base_url": "http://127.0.0.1:1/v1"}})
    )
    roots = [cell_run_config(cfg, c).workspace_root for c in expand(cfg)]
    assert len(set(roots)) == len(roots) and all(r.startswith("/scratch/ws/") for r in roots)
    assert cell_run_config(parse_sweep(sweep()), expand(cfg)[0]).workspace_root is None


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"typo": 1}, "unknown key(s) ['typo']"),
        ({"corpora": []}, "sweep.corpora must be a non-empty list"),
        ({"systems": ["rise", "rise"]}, "lists a value twice"),
        ({"k": [0]}, "every sweep.k must be >= 1"),
        ({"k": ["big"]}, "sweep.k must be a non-empty list of int"),
        ({"out": ""}, "sweep.out is required"),
        ({"run": {"out": "/x"}}, "sweep.run.out is set by the sweep itself"),
        ({"model_llm": {"gpt-9": {}}}, "model_llm names models not in sweep.models"),
        ({"corpora": [{"name": "a", "docs": "/a"}, {"name": "a", "docs": "/b"}]}, "distinct name"),
        ({"corpora": [{"name": "a", "docs": "/a", "extra": 1}]}, "sweep.corpora[0]"),
        ({"judge": {"modle": "x"}}, "sweep.judge"),
    ],
)
def test_bad_sweep_configs_are_refused_with_the_key(over: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_sweep(sweep(**over))


def test_bad_run_settings_are_refused_before_anything_runs() -> None:
    cfg = parse_sweep(sweep(run={"workers": 2, "concurency": 3}))
    with pytest.raises(ConfigError, match="concurency"):
        cell_run_config(cfg, expand(cfg)[0])
    cfg = parse_sweep(sweep(systems=["rise", "nope"]))
    with pytest.raises(ConfigError, match="unknown system 'nope'"):
        expand(cfg)


def test_example_sweeps_parse_and_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    counts = {}
    for path in sorted((ROOT / "jobs").glob("sweep_*.yaml")):
        cfg = load_sweep_config(path)
        cells = expand(cfg)
        for cell in cells:
            cell_run_config(cfg, cell)
        counts[path.stem] = len(cells)
        assert yaml.safe_load(path.read_text())["sweep"]["name"] == cfg.name
    assert counts == {"sweep_demo_fake": 4, "sweep_table1": 12, "sweep_table3": 6}
    table1 = load_sweep_config(ROOT / "jobs" / "sweep_table1.yaml")
    assert len(table1.systems) == 4 and len(table1.models) == 3
    assert load_sweep_config(ROOT / "jobs" / "sweep_table3.yaml").k == (100, 1000, 10000)


def test_corpus_size_reads_the_docmap_footer(tmp_path: Path) -> None:
    write_parquet(tmp_path / "docmap.parquet", [{"docid": str(i), "relpath": f"{i}.txt"} for i in range(7)])
    assert corpus_size(str(tmp_path)) == 7
    assert corpus_size(str(tmp_path / "missing")) is None


def test_the_sweeps_paths_are_declared_path_options_so_a_file_uri_is_the_path_it_names() -> None:
    """`out`, `queries` and each corpus's docs/index/original_docs go through the config-key check (a `file://` URI
    read as its path, as every other path key), not taken as the relative directory `file:/...`."""
    corpus = {"name": "c", "docs": "file:///data/docs", "index": "file:///data/index", "original_docs": "file:///o"}
    cfg = parse_sweep(sweep(out="file:///runs/s", queries="file:///data/q.jsonl", corpora=[corpus]))
    assert (cfg.out, cfg.queries) == ("/runs/s", "/data/q.jsonl")
    assert (cfg.corpora[0].docs, cfg.corpora[0].index, cfg.corpora[0].original_docs) == (
        "/data/docs",
        "/data/index",
        "/o",
    )
    assert parse_sweep(sweep(out="s3://bucket/runs")).out == "s3://bucket/runs"  # a storage URI is taken as it is
