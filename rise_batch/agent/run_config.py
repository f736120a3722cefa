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
from typing import TYPE_CHECKING, Any

from rise_batch.config import ConfigError, LLMConfig, build_section, read_yaml_section, section_mapping
from rise_batch.index.retriever_kinds import spec_help
from rise_batch.llm.transport import APIS  # chat completions, or the Responses API
from rise_batch.option_paths import URI, local
from rise_batch.options import option
from rise_batch.queries import GOLD_SETS
from rise_batch.storage import ObjectPath, location, redact, staging_path

# --plan's pilot: its 95% interval held the benchmark's real total 93% of the time at 50 queries, 91% at 40, 88% at
# 20 (bench/plan_pilot.py, agent/plan_estimate.py)
DEFAULT_PILOT = 50

if TYPE_CHECKING:
    from rise_batch.agent.loop import Budget

# An agent turn of a reasoning model can think for minutes and spend thousands of tokens before a tool call.
# llm.concurrency (model calls in flight per worker) defaults to the worker's share of `concurrency`, since each
# trajectory has at most one call in flight.
AGENT_LLM_DEFAULTS: dict[str, Any] = {"timeout_s": 600.0, "max_output_tokens": 16384}


def systems_help() -> str:
    """The agent systems as option help lists them (read when the parser is built, so a registered one shows)."""
    from rise_batch.agent.systems import SYSTEMS  # lazy: systems load the tools; the CLI builds flags at start-up

    return "agent system: " + ", ".join(SYSTEMS)


@dataclass(frozen=True)
class RunConfig:
    """`rise-batch run`'s settings: the YAML keys (optionally under `run:`, with a nested `llm:`) and the flags."""

    queries: str = option(
        "", path=URI, help="query file (JSONL[.gz], TSV, .json list) with query_id, query, optionally answer and gold"
    )
    system: str = option("rise", help=lambda: systems_help())
    out: str = option("", path=URI, help="run directory (created; re-running the same command resumes)")
    docs: str = option(
        "", path=URI, help="structured docs dir (a `structure` output: corpus/<relpath> + docmap.parquet)"
    )
    original_docs: str | None = option(
        None,
        path=URI,
        help="docs dir with the original text, for systems that read original files",
        shown="derived once into DOCS/original/ by removing the TOCs",
    )
    index: str | None = option(
        None, path=URI, help="BM25 index directory (from `rise-batch index` or `structure --index`; not needed by dci)"
    )
    retriever: str = option("bm25", help=spec_help)
    embedder: str | None = option(None, help="dense/hybrid: must match the index's model", shown="the recorded one")
    k: int = option(1000, help="documents linked into the workspace per sub-query")
    max_calls: int | None = option(None, help="model calls per query", shown="the system's; 100, dci 300")
    wall_clock_s: float | None = option(None, help="seconds per query", shown="the system's; 3600, dci 5400")
    limit: int | None = option(None, help="run only the first N queries")
    gold: str = option(
        "gold",
        choices=lambda: list(GOLD_SETS),
        help="gold_R's gold: the query file's gold_docs/gold_doc_ids (gold) or evidence_docs/evidence_doc_ids "
        "(evidence)",
    )
    qrels: str | None = option(
        None, path=URI, help="TREC qrels file (`qid iter docid rel`) whose relevant docs are gold_R's gold"
    )
    workers: int = option(2, help="Ray actors; 0 runs everything in this process")
    concurrency: int = option(8, help="trajectories in flight across all workers")
    ray_address: str | None = option(None, help="connect to this Ray cluster", shown="start a local Ray")
    worker_cpus: float = option(1.0, help="CPUs Ray reserves per worker actor")
    # a trajectory actor over a 1M-document index holds ~1.2-1.4 GB (RSS) while it searches
    worker_memory_gb: float = option(
        1.5,
        flag="--worker-memory",
        metavar="GB",
        help="memory Ray reserves per worker actor, so it places no more on a node than its memory holds (0: none)",
    )
    workspace_root: str | None = option(
        None,
        path=local("workspaces are local directories of hardlinks the sandbox mounts"),
        help="where per-query workspaces live",
        shown="RUN_DIR/workspaces, or beside the node's cache when the docs are in object storage",
    )
    cache_dir: str | None = option(
        None,
        path=local("the node's copies of object storage live on its own disk"),
        help="where each node keeps its copies of --docs/--index in object storage, made once per node and reused",
        shown="$RISE_BATCH_CACHE, else ~/.cache/rise-batch (under $XDG_CACHE_HOME if set)",
    )
    keep_workspaces: bool = option(False, help="keep workspaces after each query")
    bash_timeout_s: float = option(60.0, help="cap of one bash call of the agent in seconds")
    bash_max_output_chars: int = option(4000, help="characters of a bash call's output the agent sees")
    bash_nice: int = option(
        10, help="the agent's commands run this much nicer than the harness (0: as nice; see SandboxLimits)"
    )
    grace_s: float = option(30.0, help="watchdog: a trajectory still running at its budget + this is cancelled")
    kill_grace_s: float = option(
        15.0, help="... and its actor killed and replaced if it has not returned this many seconds later"
    )
    max_attempts: int = option(3, help="runs of a query whose worker died before it is recorded as failed")
    index_backend: str = option(
        "auto",
        choices=["auto", "numpy", "numba"],
        help="BM25 scorer: numpy (auto; no numba in the workers) or bm25s's numba kernel (same scores, ties its way)",
    )
    allow_unsandboxed: bool = option(
        False,
        flag="--unsandboxed",
        help="DANGEROUS: run bash without bubblewrap if it is unavailable (commands can modify the corpus)",
    )
    new_run: bool = option(
        False, help="start over when RUN_DIR holds another configuration (old files kept under superseded-*/)"
    )
    progress: bool = option(True, help="no progress output")
    max_cost_usd: float | None = option(
        None,
        flag="--max-cost",
        metavar="USD",
        help="stop cleanly (exit code 3) before the run's total cost, what RUN_DIR's spend journal records included, "
        "would pass USD; re-run with more to continue",
    )
    pilot: int = option(DEFAULT_PILOT, help="--plan: queries run for real first (a seeded sample; finished ones count)")
    api: str = option("chat", choices=lambda: list(APIS), help="chat completions or the Responses API")
    llm: LLMConfig = field(default_factory=lambda: LLMConfig(**AGENT_LLM_DEFAULTS))

    def validate(self) -> None:
        from rise_batch.agent.systems import get_system  # lazy: the CLI builds run's flags from RunConfig at start-up

        system = get_system(self.system)
        for name in ("queries", "out", "docs"):
            if not getattr(self, name):
                raise ConfigError(f"{name} is required")
        if system.uses_index and not self.index:
            raise ConfigError(f"system {self.system} searches: give the BM25 index dir (index / --index)")
        from rise_batch.space.sandbox import check_limit  # lazy: the CLI builds run's flags from RunConfig at start-up

        check_limit("bash_timeout_s", self.bash_timeout_s)  # NaN and inf too: they pass a `<= 0` test
        check_limit("bash_max_output_chars", self.bash_max_output_chars, integer=True)
        if not isinstance(self.bash_nice, int) or isinstance(self.bash_nice, bool) or not 0 <= self.bash_nice <= 19:
            raise ConfigError(f"bash_nice must be a whole number from 0 to 19, got {self.bash_nice!r}")
        positive = {
            "k": self.k,
            "concurrency": self.concurrency,
            "max_attempts": self.max_attempts,
            "pilot": self.pilot,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ConfigError(f"{name} must be > 0, got {value!r}")
        for name in ("max_calls", "wall_clock_s", "limit", "max_cost_usd"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name} must be > 0, got {value!r}")
        if self.workers < 0:
            raise ConfigError(f"workers must be >= 0, got {self.workers!r}")
        if not self.worker_memory_gb >= 0:  # also refuses NaN
            raise ConfigError(f"worker_memory_gb must be >= 0, got {self.worker_memory_gb!r}")
        if self.worker_cpus < 0:
            raise ConfigError(f"worker_cpus must be >= 0, got {self.worker_cpus!r}")
        if self.grace_s < 0 or self.kill_grace_s < 0:
            raise ConfigError("grace_s and kill_grace_s must be >= 0")
        if self.gold not in GOLD_SETS:
            raise ConfigError(f"gold must be one of {', '.join(GOLD_SETS)}, got {self.gold!r}")
        if self.qrels and not location(self.qrels).is_file():  # a path or a URI
            what = "is not a regular file" if location(self.qrels).exists() else "does not exist"
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
        # lazy: the CLI builds run's flags from RunConfig at start-up
        from rise_batch.index.retriever import RETRIEVERS, parse_retriever, parts_present

        spec = parse_retriever(self.retriever)
        if searches and self.index and Path(self.index).is_dir():  # a sweep may be planned before its index exists
            missing = [p for p in RETRIEVERS[spec.name].parts if p not in parts_present(self.index)]
            if missing:
                raise ConfigError(
                    f"retriever {spec}: the index {self.index} has no {' and '.join(missing)} part (build it with "
                    f"`rise-batch index --retriever {spec.name}`)"
                )

    def budget(self) -> Budget:
        from rise_batch.agent.loop import Budget  # lazy: the CLI builds run's flags from RunConfig at start-up
        from rise_batch.agent.systems import get_system  # lazy: the CLI builds run's flags from RunConfig at start-up

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

        if self.workspace_root:
            return Path(self.workspace_root)
        out = location(self.out)
        if isinstance(location(self.docs), ObjectPath):
            run = hashlib.sha256(redact(self.out).encode()).hexdigest()[:16]
            from rise_batch.cache import cache_dir  # lazy: the CLI builds run's flags from RunConfig at start-up

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
        # lazy: the CLI builds run's flags from RunConfig at start-up
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
