"""The registries as data: each backend's descriptor decides what was an if-chain on its name."""

from __future__ import annotations

import pytest

from rise_batch.config import ConfigError, StructureConfig, run_hash
from rise_batch.registry import BACKENDS, TRANSPORTS, Lazy
from rise_batch.structure.backends import HeuristicBackend
from rise_batch.structuring.worker import make_backend


def test_every_backend_names_an_importable_factory_and_says_whether_it_calls_an_llm() -> None:
    assert set(BACKENDS) == {"heuristic", "llm"}
    for name, b in BACKENDS.items():
        assert b.name == name and isinstance(b.factory, Lazy)
        module, _, attribute = b.factory.ref.partition(":")
        assert callable(getattr(__import__(module, fromlist=[attribute]), attribute))
    assert [n for n, b in BACKENDS.items() if b.calls_llm] == ["llm"]
    assert all(isinstance(t.factory, Lazy) and t.name == n for n, t in TRANSPORTS.items())


def test_the_worker_builds_the_backend_its_descriptor_names(tmp_path) -> None:
    cfg = StructureConfig(corpus=str(tmp_path / "c.jsonl"), out=str(tmp_path / "out"))
    assert isinstance(make_backend(cfg, ""), HeuristicBackend)
    assert not cfg.calls_llm and cfg.n_workers == 0


def test_run_hashes_and_defaults_are_those_of_the_if_chain_they_replace() -> None:
    # values computed with the code before the registry: a resume of an earlier run must find the same hash
    assert run_hash(StructureConfig(corpus="c", out="o"), "") == "8d976b69cbe16de7"
    llm = StructureConfig(corpus="c", out="o", backend="llm", tier="chars>=5")
    assert run_hash(llm, "prompt") == "04d71e2e029e235f"
    assert llm.calls_llm and llm.n_workers == 2


def test_an_unknown_backend_is_refused_naming_the_registered_ones(tmp_path) -> None:
    cfg = StructureConfig(corpus=str(tmp_path / "c.jsonl"), out=str(tmp_path / "out"), backend="gpt")
    with pytest.raises(ConfigError, match="unknown backend 'gpt'; choose 'heuristic' or 'llm'"):
        cfg.validate()
