"""rise_batch/options.py: a config field is the one source of its option. Every field of the config classes is
documented; a YAML with every key, each set away from its default, loads into exactly those values (so the keys
the docs list are the keys the loaders read); the flags show the field's default and parse like the key."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from rise_batch.agent.run_config import RunConfig, load_run_config
from rise_batch.commands.eval_retrieval import EvalRetrievalOptions
from rise_batch.commands.report import ReportOptions
from rise_batch.commands.workspace import BashOptions, ReadOptions, SearchOptions
from rise_batch.config import BatchConfig, LLMConfig, StructureConfig, build_section, load_structure_config
from rise_batch.eval.sweep import JudgeSpec
from rise_batch.index.build_options import IndexOptions
from rise_batch.logs import OutputOptions
from rise_batch.options import Entry, Layout, Section, add_layout, markdown_table, options
from rise_batch.structuring.plan_options import PlanOptions

LLM_KEYS = {
    "llm.base_url": "http://127.0.0.1:9/v1",  # local: no API key needed
    "llm.model": "some-model",
    "llm.api_key_env": "SOME_KEY",
    "llm.reasoning_effort": "low",
    "llm.prices_file": "prices.yaml",
    "llm.http_backend": "httpx",
}
STRUCTURE_KEYS = LLM_KEYS | {
    "corpus": "c.jsonl",
    "out": "o",
    "backend": "llm",
    "prompt": "p.txt",
    "ray_address": "ray://head:10001",
    "tier": "chars>=5",
    "columns": "docid=id",
    "batch.completion_window": "48h",
}
RUN_KEYS = LLM_KEYS | {
    "queries": "q.jsonl",
    "system": "rise-bm25",
    "out": "o",
    "docs": "d",
    "original_docs": "od",
    "index": "idx",
    "retriever": "hybrid",
    "embedder": "wordllama",
    "ray_address": "ray://head:10001",
    "workspace_root": "ws",
    "cache_dir": "cache",
}


def other(opt, given: dict[str, Any]) -> Any:
    """A valid value other than the default."""
    if opt.key in given:
        return given[opt.key]
    if opt.choices:
        return next(c for c in (opt.choices() if callable(opt.choices) else opt.choices) if c != opt.default)
    if opt.type is bool:
        return not opt.default
    if opt.type is int:
        return 3 if not opt.default else max(1, opt.default // 2)
    if opt.type is float:
        return 2.5 if not opt.default else opt.default / 2
    raise AssertionError(f"no value for {opt.key}")


def nested(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def value_at(cfg: Any, key: str) -> Any:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


@pytest.mark.parametrize(
    "cls",
    [
        *(StructureConfig, LLMConfig, BatchConfig, RunConfig, JudgeSpec, PlanOptions, IndexOptions),
        *(EvalRetrievalOptions, SearchOptions, BashOptions, ReadOptions, ReportOptions, OutputOptions),
    ],
)
def test_every_field_is_documented(cls: type) -> None:
    bare = [
        f.name for f in dataclasses.fields(cls) if not f.metadata.get("help") and not dataclasses.is_dataclass(f.type)
    ]
    assert not [b for b in bare if b not in ("llm", "batch")], f"{cls.__name__} fields without help: {bare}"


@pytest.mark.parametrize(
    "cls, section, given, load",
    [
        (StructureConfig, "structure", STRUCTURE_KEYS, load_structure_config),
        (RunConfig, "run", RUN_KEYS, load_run_config),
    ],
)
def test_a_yaml_with_every_key_loads_into_those_values(tmp_path: Path, cls, section, given, load) -> None:
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 1\n")
    flat = {key: other(opt, given | {"qrels": str(qrels)}) for key, opt in options(cls).items()}
    assert all(flat[k] != opt.default for k, opt in options(cls).items()), "every key away from its default"
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({section: nested(flat)}))
    cfg = load(path)
    assert {k: value_at(cfg, k) for k in flat} == flat


def test_a_sweeps_judge_section_with_every_key_loads() -> None:
    flat = {
        key: other(
            opt,
            LLM_KEYS
            | {
                "model": "j",
                "base_url": "http://127.0.0.1:9/v1",
                "api_key_env": "K",
                "reasoning_effort": "low",
                "prompt": "g.txt",
            },
        )
        for key, opt in options(JudgeSpec).items()
    }
    spec = build_section(JudgeSpec, nested(flat), "judge")
    assert {k: value_at(spec, k) for k in flat} == flat


def test_flags_show_the_fields_default_and_parse_like_the_key() -> None:
    parser = argparse.ArgumentParser()
    layout = Layout(
        RunConfig,
        (Section(None, ("k", "progress")), Section("model", ("llm.timeout_s", Entry("llm.concurrency", "--llm-c")))),
    )
    groups = add_layout(parser, layout)
    assert set(groups) == {None, "model"}
    helps = {a.option_strings[0]: a.help for a in parser._actions if a.option_strings}
    assert helps["--k"].endswith("(default 1,000)")
    assert helps["--timeout"].endswith("(default 600)")  # RunConfig's llm, not LLMConfig's 120
    assert "--no-progress" in helps
    args = parser.parse_args(["--k", "7", "--no-progress", "--llm-c", "2"])
    assert (args.k, args.progress, args.llm_concurrency, args.llm_timeout_s) == (7, False, 2, None)
    cfg = load_run_config(
        None, **vars(args), queries="q", out="o", docs="d", index="i", llm_base_url=LLM_KEYS["llm.base_url"]
    )
    assert (cfg.k, cfg.progress, cfg.llm.concurrency, cfg.llm.timeout_s) == (7, False, 2, 600.0)


def test_the_markdown_table_escapes_pipes_and_lists_config_only_keys() -> None:
    text = markdown_table(Layout(StructureConfig, (Section(None, ("backend",)),)))
    assert "| `--backend` | `backend` | `heuristic` \\| `llm` | `heuristic` |" in text
    assert "| (config file) | `batch.max_bytes` | int | `200,000,000` |" in text


def test_a_repeatable_field_is_an_append_flag_whose_default_list_is_the_parsers_own() -> None:
    """--query A --query B; a parse without it gets an empty list that is not the field's (a new one per instance)."""
    parser = argparse.ArgumentParser()
    add_layout(parser, Layout(IndexOptions, (Section(None, ("query",)),), from_file=False))
    assert parser.parse_args(["--query", "a b", "--query", "c"]).query == ["a b", "c"]
    parser.parse_args([]).query.append("x")
    assert IndexOptions().query == []
    table = markdown_table(Layout(IndexOptions, (Section(None, ("query", Entry("out", required=True))),)), None)
    assert "| flag | type | default | help |" in table  # no config file: no key column
    assert "| `--query` | str, repeatable |  |" in table
    assert "| `--out` | path or URI | required |" in table  # a path option says whether it takes a URI


def test_the_code_behind_a_command_defaults_to_its_options_fields() -> None:
    """One default: build_index's and the plan's output model's are the fields the flags and the docs show."""
    import inspect

    from rise_batch.index.build import build_index
    from rise_batch.structuring.plan import OutputModel

    params = inspect.signature(build_index).parameters
    assert params["shard_docs"].default == IndexOptions.shard_docs
    assert params["workers"].default == IndexOptions.workers
    assert OutputModel().tokens_per_section == PlanOptions.tokens_per_section
    assert OutputModel().section_scale_chars == PlanOptions.section_scale_chars
