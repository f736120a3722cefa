"""The configuration of a trajectory run (`rise-batch run`, jobs/run_trajectories.py), validated at the edge.

`config_hash` covers what changes a trajectory (system, prompt text, model and its settings, K, budgets, tool
limits) and nothing else, so paths, worker counts and rate limits can change between a run and its resume; a
trajectory file written under another hash is not reused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rise_batch.agent.loop import Budget
from rise_batch.config import ConfigError, LLMConfig, build_section, read_yaml_section, section_mapping
from rise_batch.llm.transport import APIS  # chat completions, or the Responses API
from rise_batch.queries import GOLD_SETS
from rise_batch.space.sandbox import check_limit

# An agent turn of a reasoning model can think for minutes and spend thousands of tokens before a tool call.
# llm.concurrency (model calls in flight per worker) defaults to the worker's share of `concurrency`, since each
# trajectory has at most one call in flight.
AGENT_LLM_DEFAULTS: dict[str, Any] = {"timeout_s": 600.0, "max_output_tokens": 16384}


@dataclass(frozen=True)
class RunConfig:
    queries: str = ""
    system: str = "rise"
    out: str = ""
    docs: str = ""  # structured docs dir (a `rise-batch structure` output): DIR/corpus/<relpath> + docmap.parquet
    original_docs: str | None = None  # original-text docs for rise-bm25/retrieval-agent/dci (default: derived)
    index: str | None = None  # index dir (not needed by dci)
    retriever: str = "bm25"  # bm25, dense, hybrid[:rrf[:K]|:weighted[:W]] (rise_batch.index.retriever)
    embedder: str | None = None  # dense/hybrid: must match the index's recorded model (None: the recorded one)
    k: int = 1000
    max_calls: int | None = None  # None: the system's default (100; dci 300)
    wall_clock_s: float | None = None  # None: the system's default (3600; dci 5400)
    limit: int | None = None  # first N queries only
    gold: str = "gold"  # gold_R's gold: the query file's gold or evidence documents (rise_batch.queries.select_gold)
    qrels: str | None = None  # ... or a TREC qrels file's relevant documents
    workers: int = 2  # Ray actors; 0 runs every trajectory in this process
    concurrency: int = 8  # trajectories in flight across all workers
    ray_address: str | None = None
    worker_cpus: float = 1.0
    workspace_root: str | None = None  # default OUT/workspaces (beside the node's cache when docs are cached)
    cache_dir: str | None = None  # node-local copies of object-storage docs/index (default storage.cache_root())
    keep_workspaces: bool = False
    bash_timeout_s: float = 60.0
    bash_max_output_chars: int = 4000
    bash_nice: int = 10  # the agent's commands run this much nicer than the harness (0: as nice); see SandboxLimits
    grace_s: float = 30.0  # watchdog: a trajectory still running at budget + grace is cancelled ...
    kill_grace_s: float = 15.0  # ... and its actor killed and replaced if it has not returned after this
    max_attempts: int = 3  # runs of a query whose worker died before it is recorded as failed
    index_backend: str = "auto"
    allow_unsandboxed: bool = False
    new_run: bool = False
    progress: bool = True
    api: str = "chat"
    llm: LLMConfig = field(default_factory=lambda: LLMConfig(**AGENT_LLM_DEFAULTS))

    def validate(self) -> None:
        from rise_batch.agent.systems import get_system

        system = get_system(self.system)
        for name in ("queries", "out", "docs"):
            if not getattr(self, name):
                raise ConfigError(f"{name} is required")
        if system.uses_index and not self.index:
            raise ConfigError(f"system {self.system} searches: give the BM25 index dir (index / --index)")
        check_limit("bash_timeout_s", self.bash_timeout_s)  # NaN and inf too: they pass a `<= 0` test
        check_limit("bash_max_output_chars", self.bash_max_output_chars, integer=True)
        if not isinstance(self.bash_nice, int) or isinstance(self.bash_nice, bool) or not 0 <= self.bash_nice <= 19:
            raise ConfigError(f"bash_nice must be a whole number from 0 to 19, got {self.bash_nice!r}")
        positive = {"k": self.k, "concurrency": self.concurrency, "max_attempts": self.max_attempts}
        for name, value in positive.items():
            if value <= 0:
                raise ConfigError(f"{name} must be > 0, got {value!r}")
        for name in ("max_calls", "wall_clock_s", "limit"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name} must be > 0, got {value!r}")
        if self.workers < 0:
            raise ConfigError(f"workers must be >= 0, got {self.workers!r}")
        if self.worker_cpus < 0:
            raise ConfigError(f"worker_cpus must be >= 0, got {self.worker_cpus!r}")
        if self.grace_s < 0 or self.kill_grace_s < 0:
            raise ConfigError("grace_s and kill_grace_s must be >= 0")
        if self.gold not in GOLD_SETS:
            raise ConfigError(f"gold must be one of {', '.join(GOLD_SETS)}, got {self.gold!r}")
        if self.qrels and not Path(self.qrels).is_file():
            what = "is not a regular file" if Path(self.qrels).exists() else "does not exist"
            raise ConfigError(f"qrels file {self.qrels} {what} (check the --qrels path)")
        self.check_retriever(system.uses_index)
        if self.index_backend not in ("auto", "numpy", "numba"):
            raise ConfigError(f"index_backend must be auto, numpy or numba, got {self.index_backend!r}")
        if self.api not in APIS:
            raise ConfigError(f"api must be one of {', '.join(APIS)}, got {self.api!r}")
        self.llm.validate()
        self.llm.api_key()

    def check_retriever(self, searches: bool) -> None:
        """The retriever parses and, for a system that searches, the index holds its parts: a run refuses up front,
        not at its first search call."""
        from rise_batch.index.retriever import PARTS, parse_retriever, parts_present

        spec = parse_retriever(self.retriever)
        if searches and self.index and Path(self.index).is_dir():  # a sweep may be planned before its index exists
            missing = [p for p in PARTS[spec.name] if p not in parts_present(self.index)]
            if missing:
                raise ConfigError(
                    f"retriever {spec}: the index {self.index} has no {' and '.join(missing)} part (build it with "
                    f"`rise-batch index --retriever {spec.name}`)"
                )

    def budget(self) -> Budget:
        from rise_batch.agent.systems import get_system

        system = get_system(self.system)
        return Budget(
            max_calls=self.max_calls or system.max_calls,
            wall_clock_s=self.wall_clock_s or system.wall_clock_s,
            call_timeout_s=self.llm.timeout_s,
        )

    @property
    def workspace_dir(self) -> Path:
        """--workspace-root, else RUN_DIR/workspaces. Workspaces hardlink the docs, so where the docs are this node's
        cached copy of object storage they go beside it (CACHE/workspaces/<run>: one file system), and a run
        directory in object storage keeps them on this machine's disk."""
        import hashlib

        from rise_batch.storage import ObjectPath, location, redact, staging_path

        if self.workspace_root:
            return Path(self.workspace_root)
        out = location(self.out)
        if isinstance(location(self.docs), ObjectPath):
            from rise_batch.cache import cache_dir

            run = hashlib.sha256(redact(self.out).encode()).hexdigest()[:16]
            return cache_dir(self.cache_dir) / "workspaces" / run
        return staging_path(out / "workspaces") if isinstance(out, ObjectPath) else out / "workspaces"


def config_hash(cfg: RunConfig, prompt_text: str) -> str:
    b = cfg.budget()
    basis = {
        "system": cfg.system,
        "prompt": hashlib.sha256(prompt_text.encode()).hexdigest(),
        "model": cfg.llm.model,
        "reasoning_effort": cfg.llm.reasoning_effort,
        "max_output_tokens": cfg.llm.max_output_tokens,
        "api": cfg.api,
        "k": cfg.k,
        "max_calls": b.max_calls,
        "wall_clock_s": b.wall_clock_s,
        "bash": [cfg.bash_timeout_s, cfg.bash_max_output_chars],
    }
    if cfg.retriever != "bm25":  # only then, so the hash of every bm25 run made before retrievers existed holds
        from rise_batch.index.retriever import parse_retriever

        basis["retriever"] = str(parse_retriever(cfg.retriever))
    return hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:16]


def load_run_config(path: str | Path | None = None, **overrides: Any) -> RunConfig:
    """YAML (optional; a top-level `run:` mapping or the mapping itself), then flags (None = not given)."""
    data = read_yaml_section(path, "run")
    llm_over = {k[4:]: v for k, v in overrides.items() if k.startswith("llm_") and v is not None}
    data.update({k: v for k, v in overrides.items() if not k.startswith("llm_") and v is not None})
    data["llm"] = {**AGENT_LLM_DEFAULTS, **section_mapping(data, "llm"), **llm_over}
    cfg = build_section(RunConfig, data, "")
    if "concurrency" not in data["llm"] and cfg.concurrency > 0:
        per_worker = -(-cfg.concurrency // max(cfg.workers, 1))
        cfg = dataclasses.replace(cfg, llm=dataclasses.replace(cfg.llm, concurrency=per_worker))
    cfg.validate()
    return cfg


def run_config_from_dict(data: dict[str, Any]) -> RunConfig:
    return build_section(RunConfig, data, "")
