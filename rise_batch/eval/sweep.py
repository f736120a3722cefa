"""Evaluation sweeps: a grid of systems x models x K x retrievers x corpora x repeats, each cell a run directory.

A sweep is only bookkeeping around two things that already resume on their own (`rise-batch run` per query,
`rise-batch judge` per judgment): it expands the grid, builds and validates every cell's RunConfig before anything
runs (a typo in the last cell fails in the first second, not after a day of the first eleven), runs the cells one
after the other in the same driver, so on one Ray cluster, and records each finished cell in `sweep.json`, so a
re-run skips finished cells without even reading their trajectories. The report at the end covers every cell.

Systems that do not search (DCI) do not depend on K: they get one cell per model, corpus and repeat, labelled
with no K, instead of identical copies per K (and no retriever). `retrievers` (default [bm25]) names the retrievers
of rise_batch.index.retriever to compare; a cell's id carries its retriever unless it is bm25, so the cells of a
sweep made before retrievers existed keep their ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from rise_batch.agent.run_config import AGENT_LLM_DEFAULTS, DEFAULT_PILOT, RunConfig
from rise_batch.config import ConfigError, LLMConfig, build_section, read_yaml_file, section_mapping
from rise_batch.names import bounded, portable
from rise_batch.option_paths import URI
from rise_batch.options import option, same_as
from rise_batch.storage import AnyPath, child, location, open_binary, redact


@dataclass(frozen=True)
class CorpusSpec:
    name: str = ""
    docs: str = option("", path=URI, help="a `rise-batch structure` output dir (corpus/ + docmap.parquet)")
    index: str | None = option(None, path=URI, help="BM25 index dir (systems that search)")
    original_docs: str | None = option(None, path=URI, help="the corpus's original documents (systems that read them)")
    size: int | None = None  # documents; default: rows of docs/docmap.parquet (for accuracy vs corpus size)


@dataclass(frozen=True)
class JudgeSpec:
    """The grader's settings: a sweep's `judge:` keys and `rise-batch judge`'s flags (LLMConfig's where they are the
    same setting)."""

    enabled: bool = option(True, help="grade the sweep's answers (sweeps only)")
    model: str = same_as(LLMConfig, "model", default="gpt-5.4-mini", help="judge model")
    base_url: str | None = same_as(LLMConfig, "base_url")
    api_key_env: str = same_as(LLMConfig, "api_key_env")
    reasoning_effort: str | None = same_as(LLMConfig, "reasoning_effort")
    max_output_tokens: int = same_as(LLMConfig, "max_output_tokens", help="cap of one grader reply's tokens")
    timeout_s: float = same_as(LLMConfig, "timeout_s")
    rpm: int = same_as(LLMConfig, "rpm")
    tpm: int = same_as(LLMConfig, "tpm")
    concurrency: int = same_as(LLMConfig, "concurrency", default=16, help="requests in flight")
    prompt: str = option(
        "judge_grader",
        path=URI,
        help="grader prompt: a name in prompts/ or a file path, relative to the working directory",
    )
    structured_output: bool = same_as(LLMConfig, "structured_output")
    mode: str = option(
        "online",
        choices=["online", "batch"],
        help="online: rate-limited calls now; batch: the OpenAI Batch API (half price, results within 24 h)",
    )
    poll_s: float = option(30.0, help="batch mode: seconds between status polls")
    max_cost_usd: float | None = option(
        None,
        flag="--max-cost",
        metavar="USD",
        help="stop cleanly (exit code 3) before the judging's total cost, what its spend journals record included, "
        "would pass USD; re-run with more to continue",
    )


@dataclass(frozen=True)
class SweepConfig:
    name: str = "sweep"
    out: str = option("", path=URI, help="the sweep's directory: OUT/cells/<cell>/, OUT/sweep.json, OUT/report/")
    queries: str = option("", path=URI, help="queries JSONL (or Parquet) every cell runs")
    limit: int | None = None
    systems: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    k: tuple[int, ...] = (1000,)
    retrievers: tuple[str, ...] = ("bm25",)
    repeats: int = 1
    corpora: tuple[CorpusSpec, ...] = ()
    run: dict[str, Any] = field(default_factory=dict)  # RunConfig keys shared by every cell (llm: {...} too)
    model_llm: dict[str, Any] = field(default_factory=dict)  # model -> llm overrides (reasoning_effort, ...)
    judge: JudgeSpec = field(default_factory=JudgeSpec)
    report: bool = True
    pilot: int = DEFAULT_PILOT  # queries each cell's pilot runs for `--plan` (SweepRun.pilot overrides it)
    max_cost_usd: float | None = None  # one cap on the whole sweep: every cell's agents and the judge (--max-cost)


@dataclass(frozen=True)
class SweepRun:
    """What one `rise-batch sweep` / `jobs/eval_sweep.py` invocation asks of a sweep config: the flags of both are
    made from these fields (rise_batch/commands/sweep.py), so the command and the job cannot drift apart. `pilot`
    and `max_cost_usd` override the config's keys of the same name when given."""

    only: list[str] | None = option(
        None, help="run only this cell (repeatable; ids as --dry-run lists them)", repeatable=True, metavar="CELL"
    )
    dry_run: bool = option(False, help="validate every cell and list them with their queries done; run nothing")
    plan: bool = option(
        False, help="run each cell's pilot (in its own run directory, so the sweep resumes past it), print the plan"
    )
    pilot: int | None = option(
        None, help="queries in each cell's pilot", shown=f"the config's `pilot`, else {DEFAULT_PILOT}"
    )
    max_cost_usd: float | None = option(
        None,
        flag="--max-cost",
        metavar="USD",
        help="one cap on the whole sweep's spend (agents and judge, what OUT's spend journals record included); exit 3",
        shown="the config's `max_cost_usd`, else none",
    )
    force_judge: bool = option(False, help="re-grade every cell's answers")


MAX_CELL_ID = 200  # bytes of a cell's directory name: a file name is at most 255, with room for what is added to it


class Cell(NamedTuple):
    system: str
    model: str
    k: int | None  # None: the system does not search
    corpus: CorpusSpec
    repeat: int
    retriever: str = "bm25"

    @property
    def cell_id(self) -> str:
        """The cell's directory name: its parts in the portable alphabet (so `a/b` and `a_b` give the same id:
        `check_cell_ids` refuses such a pair), shortened with a digest past MAX_CELL_ID bytes."""
        parts = [self.system, self.model, "all" if self.k is None else f"k{self.k}", self.corpus.name]
        parts += [] if self.retriever == "bm25" else [self.retriever.replace(":", "-")]
        cid = "__".join(portable(p) for p in parts)
        return bounded(cid + (f"__r{self.repeat}" if self.repeat else ""), MAX_CELL_ID)

    def describe(self) -> str:
        """The cell as the config names it (the names before they were made a directory name)."""
        k = "none" if self.k is None else self.k
        return (
            f"(system {self.system!r}, model {self.model!r}, k {k}, corpus {self.corpus.name!r}, retriever "
            f"{self.retriever!r}, repeat {self.repeat})"
        )

    def labels(self) -> dict[str, Any]:
        """What cell.json records: the report labels sweep plots with it."""
        return {
            "cell": self.cell_id,
            "system": self.system,
            "model": self.model,
            "k": self.k,
            "corpus": self.corpus.name,
            "corpus_docs": self.corpus.size if self.corpus.size is not None else corpus_size(self.corpus.docs),
            "repeat": self.repeat,
            **({"retriever": self.retriever} if self.retriever != "bm25" else {}),  # as in the cell id
        }


def _names(value: Any, key: str, kind: type) -> tuple:
    items = value if isinstance(value, list | tuple) else [value]
    if not items or not all(isinstance(v, kind) and not isinstance(v, bool) for v in items):
        raise ConfigError(f"sweep.{key} must be a non-empty list of {kind.__name__}, got {value!r}")
    if len(set(items)) != len(items):
        raise ConfigError(f"sweep.{key} lists a value twice: {value!r}")
    return tuple(items)


def parse_sweep(data: dict[str, Any]) -> SweepConfig:
    """A SweepConfig from the YAML mapping (its `sweep:` key or the mapping itself), validated."""
    data = dict(data.get("sweep", data)) if isinstance(data, dict) else data
    if not isinstance(data, dict):
        raise ConfigError("a sweep config is a mapping")
    corpora = data.pop("corpora", None)
    if not isinstance(corpora, list) or not corpora:
        raise ConfigError("sweep.corpora must be a non-empty list of {name, docs, index?, original_docs?, size?}")
    specs = tuple(build_section(CorpusSpec, c, f"sweep.corpora[{i}]") for i, c in enumerate(corpora))
    lists = {"systems": str, "models": str, "k": int, "retrievers": str}
    parsed: dict[str, Any] = {key: _names(data.pop(key), key, kind) for key, kind in lists.items() if key in data}
    for key in ("run", "model_llm"):  # free-form mappings, checked when each cell's RunConfig is built
        value = data.pop(key, None) or {}
        if not isinstance(value, dict):
            raise ConfigError(f"sweep.{key} must be a mapping, got {value!r}")
        parsed[key] = value
    cfg = build_section(SweepConfig, data, "sweep")
    cfg = SweepConfig(**{**cfg.__dict__, **parsed, "corpora": specs})
    validate(cfg)
    return cfg


def validate(cfg: SweepConfig) -> None:
    for name in ("out", "queries"):
        if not getattr(cfg, name):
            raise ConfigError(f"sweep.{name} is required")
    if not cfg.systems or not cfg.models:
        raise ConfigError("sweep.systems and sweep.models must each list at least one value")
    if cfg.pilot < 1:
        raise ConfigError(f"sweep.pilot must be >= 1, got {cfg.pilot!r}")
    if cfg.max_cost_usd is not None and not cfg.max_cost_usd > 0:
        raise ConfigError(f"sweep.max_cost_usd must be > 0, got {cfg.max_cost_usd!r}")
    if cfg.repeats < 1 or any(k < 1 for k in cfg.k):
        raise ConfigError("sweep.repeats and every sweep.k must be >= 1")
    names = [c.name for c in cfg.corpora]
    if any(not n for n in names) or len(set(names)) != len(names):
        raise ConfigError(f"every corpus needs a distinct name, got {names!r}")
    for c in cfg.corpora:
        if not c.docs:
            raise ConfigError(f"corpus {c.name!r} needs docs (a structured docs dir)")
    for key in ("out", "queries", "system", "docs", "index", "original_docs", "k", "retriever", "new_run"):
        if key in cfg.run:
            where = " (list them in sweep.retrievers)" if key == "retriever" else ""
            raise ConfigError(f"sweep.run.{key} is set by the sweep itself (per cell); remove it{where}")
    if cfg.judge.mode not in ("online", "batch"):
        raise ConfigError(f"sweep.judge.mode must be 'online' or 'batch', got {cfg.judge.mode!r}")
    unknown = set(cfg.model_llm) - set(cfg.models)
    if unknown:
        raise ConfigError(f"sweep.model_llm names models not in sweep.models: {sorted(unknown)}")


def check_cell_ids(cfg: SweepConfig, cells: list[Cell]) -> None:
    """Refuse two cells that would write one run directory: names that differ only in characters outside the
    portable alphabet (`a/b`, `a_b`, `a b`) or only in case (one directory on a case-insensitive file system)."""
    seen: dict[str, Cell] = {}
    for cell in cells:
        other = seen.setdefault(cell.cell_id.casefold(), cell)
        if other is not cell:
            raise ConfigError(
                f"sweep cells {other.describe()} and {cell.describe()} would share one run directory "
                f"({redact(cell_out(cfg, other))}): their names differ only in characters a directory name cannot "
                "keep or in case; rename a corpus, system or model so that they differ in letters, digits, `.`, "
                "`-` or `_`"
            )


def load_sweep_config(path: str | Path) -> SweepConfig:
    return parse_sweep(read_yaml_file(path, "sweep config") or {})


def expand(cfg: SweepConfig) -> list[Cell]:
    """Every cell, in a stable order: corpus, model, system, K, retriever, repeat (one model's cells together), each
    with a run directory of its own."""
    from rise_batch.agent.systems import get_system  # lazy: the CLI builds judge's flags from JudgeSpec at start-up

    cells = []
    for corpus in cfg.corpora:
        for model in cfg.models:
            for system in cfg.systems:
                searches = get_system(system).uses_index
                ks: tuple[int | None, ...] = cfg.k if searches else (None,)
                for k in ks:
                    for retriever in cfg.retrievers if searches else ("bm25",):
                        cells.extend(Cell(system, model, k, corpus, r, retriever) for r in range(cfg.repeats))
    check_cell_ids(cfg, cells)  # before any cell is run or listed
    return cells


def with_run(cfg: SweepConfig, run: SweepRun) -> SweepConfig:
    """The config with what the invocation overrides (`--pilot`, `--max-cost`), validated again."""
    changes = {k: getattr(run, k) for k in ("pilot", "max_cost_usd") if getattr(run, k) is not None}
    if not changes:
        return cfg
    cfg = replace(cfg, **changes)
    validate(cfg)
    return cfg


def cell_out(cfg: SweepConfig, cell: Cell) -> str:
    """The cell's run directory as its RunConfig names it: a URI keeps the options of the sweep's `out` (endpoint,
    keys), so each worker that is handed the cell's config reaches the same bucket."""
    return child(cfg.out, "cells", cell.cell_id)


def cell_dir(cfg: SweepConfig, cell: Cell) -> AnyPath:
    """The cell's run directory: a Path, or an ObjectPath when the sweep's `out` is in object storage."""
    return location(cell_out(cfg, cell))


def cell_run_config(cfg: SweepConfig, cell: Cell) -> Any:
    """The cell's RunConfig: the sweep's shared `run:` settings plus the cell's coordinates (validated)."""

    data = {k: v for k, v in cfg.run.items() if k != "llm"}
    data |= {
        "queries": cfg.queries,
        "system": cell.system,
        "out": cell_out(cfg, cell),
        "docs": cell.corpus.docs,
        "index": cell.corpus.index,
        "original_docs": cell.corpus.original_docs,
        "k": cell.k if cell.k is not None else cfg.k[0],
        "retriever": cell.retriever,
        "limit": cfg.limit,
    }
    if isinstance(data.get("workspace_root"), str | Path) and data["workspace_root"]:
        # each cell is a run, and a run claims its workspace root for itself (agent/workspace_root.py): one each
        data["workspace_root"] = str(Path(data["workspace_root"]) / cell.cell_id)
    per_model = section_mapping(cfg.model_llm, cell.model, "sweep.model_llm")
    llm = {**AGENT_LLM_DEFAULTS, **section_mapping(cfg.run, "llm", "sweep.run"), **per_model}
    data["llm"] = llm | {"model": cell.model}
    run = build_section(RunConfig, data, f"cell {cell.cell_id}")
    run.validate()
    return run


def judge_llm_config(spec: JudgeSpec) -> Any:
    llm = LLMConfig(
        base_url=spec.base_url,
        model=spec.model,
        api_key_env=spec.api_key_env,
        reasoning_effort=spec.reasoning_effort,
        max_output_tokens=spec.max_output_tokens,
        timeout_s=spec.timeout_s,
        rpm=spec.rpm,
        tpm=spec.tpm,
        concurrency=spec.concurrency,
        structured_output=spec.structured_output,
    )
    llm.validate()
    return llm


def corpus_size(docs: str) -> int | None:
    """Rows of docs/docmap.parquet from its footer (no data read); None when there is none."""
    import pyarrow.parquet as pq

    def rows(p: AnyPath) -> int:
        with open_binary(p) as f:
            return pq.ParquetFile(f).metadata.num_rows

    try:
        path = location(docs) / "docmap.parquet"
        if path.is_dir():
            return sum(rows(p) for p in sorted(path.glob("*.parquet")))
        return rows(path) if path.exists() else None
    except (OSError, ValueError):
        return None
