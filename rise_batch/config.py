"""Typed, validated configuration: YAML files and CLI flags both end here.

Validation happens once, at the edge, with messages that name the offending key, so a typo in a 1M-document job
fails in the first second rather than an hour in. `run_hash` covers only what changes a document's output; paths,
worker counts and rate limits can change between a run and its resume.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

from rise_batch.corpus.readers import COLUMNS_HELP, canonical_columns, corpus_help
from rise_batch.errors import ConfigError as ConfigError  # re-exported: callers import it from here too
from rise_batch.option_paths import URI, checked_path
from rise_batch.options import option
from rise_batch.registry import BACKENDS, TRANSPORTS, one_of
from rise_batch.safe_read import RefusedFile, read_regular_file
from rise_batch.storage import ObjectPath, is_uri, location, open_binary, redact
from rise_batch.storage_errors import storage_failure
from rise_batch.tier_rule import parse_tier

HEURISTIC_VERSION = "1"


@dataclass(frozen=True)
class LLMConfig:
    """The endpoint, model and request settings of every LLM call (structuring, agent turns, the judge)."""

    base_url: str | None = option(
        None, help="OpenAI-compatible base URL (e.g. http://127.0.0.1:8000/v1)", shown="OpenAI's"
    )
    model: str = option("gpt-5.4-nano", help="model name")
    api_key_env: str = option("OPENAI_API_KEY", help="environment variable holding the key")
    reasoning_effort: str | None = option(
        None,
        help="reasoning effort of reasoning models: none, minimal, low, medium, high or xhigh",
        shown="the model's",
    )
    max_output_tokens: int = option(4096, help="cap of one reply's tokens, reasoning included; reserved against --tpm")
    timeout_s: float = option(120.0, flag="--timeout", help="per-request timeout in seconds")
    max_attempts: int = option(8, help="tries of a request that fails for a transient reason (connection, 429, 5xx)")
    # a failure that repeats run after run (an overloaded or broken endpoint for that one input) must not hold the job
    # open forever: exit 75 promises that the same command does the rest
    max_transient_runs: int = option(
        3,
        help="a document whose requests fail for a transient reason (5xx, timeouts, ...) in this many runs in a row "
        "is recorded with outcome error naming the failures, so the job can end",
    )
    rpm: int = option(500, help="requests per minute, whole job (raise it for a local server)")
    tpm: int = option(2_000_000, help="tokens per minute, whole job")
    limit_window_s: float = option(60.0, help="the window rpm and tpm count over; only tests shrink it")
    concurrency: int = option(32, help="requests in flight per worker")
    reask: bool = option(True, help="ask once more when a reply does not parse or none of its anchors is found")
    max_input_chars: int = option(200_000, help="cut longer documents (recorded per row)")
    max_input_tokens: int | None = option(
        None,
        help="cut documents longer than this many tokens of the model's tokenizer, at a line break (recorded per row)",
    )
    prices_file: str | None = option(
        None,
        metavar="YAML",
        path=URI,
        help="prices of models not in the packaged table (or overriding it): `models: {NAME: {input: USD, "
        "cached_input: USD, output: USD}}` per 1M tokens; --max-cost refuses to start on a model without a price",
    )
    # direct: the project's lean aiohttp + orjson path, ~1.5 ms less CPU per request than the SDK, with the SDK's URL,
    # headers, error wording and retry classification (tests/llm/test_foreign_faults.py); httpx / aiohttp: the openai
    # SDK's AsyncOpenAI on either HTTP client (the reference path)
    http_backend: str = option(
        "direct", help=lambda: "the HTTP transport: " + "; ".join(f"{t.name}: {t.help}" for t in TRANSPORTS.values())
    )
    # a server that refuses it (400 "response_format not supported") turns it off for the rest of the run, with a
    # warning, counted in the stats (llm/client.py)
    structured_output: bool = option(
        True,
        help="do not send the caller's JSON schema (the TOC's, the grader's) as response_format (for providers "
        "without structured outputs; a server that refuses it turns it off by itself, after one refused request)",
    )

    def validate(self) -> None:
        # read from the registry, so a new transport needs no edit here
        if self.http_backend not in TRANSPORTS:
            raise ConfigError(f"llm.http_backend must be {one_of(TRANSPORTS)}, got {self.http_backend!r}")
        if self.rpm <= 0:
            raise ConfigError(f"llm.rpm must be a positive integer, got {self.rpm!r}")
        if self.tpm <= 0:
            raise ConfigError(f"llm.tpm must be a positive integer, got {self.tpm!r}")
        if self.limit_window_s <= 0:
            raise ConfigError(f"llm.limit_window_s must be > 0, got {self.limit_window_s!r}")
        if self.max_input_tokens is not None and self.max_input_tokens <= 0:
            raise ConfigError(f"llm.max_input_tokens must be a positive integer, got {self.max_input_tokens!r}")
        if self.concurrency <= 0:
            raise ConfigError(f"llm.concurrency must be >= 1, got {self.concurrency!r}")
        if self.max_transient_runs <= 0:
            raise ConfigError(f"llm.max_transient_runs must be >= 1, got {self.max_transient_runs!r}")
        if self.max_attempts <= 0:
            raise ConfigError(f"llm.max_attempts must be >= 1, got {self.max_attempts!r}")
        if self.timeout_s <= 0:
            raise ConfigError(f"llm.timeout_s must be > 0, got {self.timeout_s!r}")
        if self.reasoning_effort not in (None, "none", "minimal", "low", "medium", "high", "xhigh"):
            raise ConfigError(f"llm.reasoning_effort {self.reasoning_effort!r} is not a known effort level")

    def api_key(self) -> str:
        """The key, or a clear error; a local server (the fake one) needs none."""
        key = os.environ.get(self.api_key_env)
        if key:
            return key
        if self.base_url and any(h in self.base_url for h in ("://127.0.0.1", "://localhost", "://[::1]")):
            return "local-no-key"
        raise ConfigError(
            f"the llm backend needs an API key: set ${self.api_key_env}, or name another variable with --api-key-env "
            "(config llm.api_key_env), or point --base-url (config llm.base_url) at a local OpenAI-compatible server "
            "such as `rise-batch fake-llm`"
        )


@dataclass(frozen=True)
class BatchConfig:
    """`mode: batch` settings (OpenAI Batch API: half price, results within the completion window)."""

    retry: str = option(
        "online",
        flag="--batch-retry",
        choices=("online", "batch"),
        help="batch mode: failed/expired lines and re-asks go online (full price, now) or into a new batch round",
    )
    max_rounds: int = option(3, help="batch rounds a request may take (retry: batch) before its document is an error")
    poll_s: float = option(30.0, flag="--batch-poll-s", help="batch mode: seconds between polls")
    max_requests: int = option(50_000, flag="--batch-max-requests", help="requests per batch file (the API's limit)")
    max_bytes: int = option(200_000_000, help="bytes per batch file (the API's limit: 200 MB)")
    max_active: int | None = option(
        None,
        flag="--batch-max-active",
        help="packs (batch files) in flight at once, to stay under the provider's enqueued-token limit",
        shown="no limit",
    )
    completion_window: str = option("24h", help="the Batch API's completion window")

    def validate(self) -> None:
        if self.retry not in ("online", "batch"):
            raise ConfigError(f"batch.retry must be 'online' or 'batch', got {self.retry!r}")
        if self.max_rounds < 1:
            raise ConfigError(f"batch.max_rounds must be >= 1, got {self.max_rounds!r}")
        if self.poll_s <= 0:
            raise ConfigError(f"batch.poll_s must be > 0, got {self.poll_s!r}")
        if not 1 <= self.max_requests <= 50_000:
            raise ConfigError(f"batch.max_requests must be in 1..50000 (the API's limit), got {self.max_requests!r}")
        if not 1 <= self.max_bytes <= 200_000_000:
            raise ConfigError(f"batch.max_bytes must be in 1..200000000 (the API's limit), got {self.max_bytes!r}")
        if self.max_active is not None and self.max_active < 1:
            raise ConfigError(f"batch.max_active must be >= 1, got {self.max_active!r}")


@dataclass(frozen=True)
class StructureConfig:
    """`rise-batch structure`'s settings: the YAML keys (nested `llm:` and `batch:`) and the flags are these fields."""

    corpus: str = option("", path=URI, help=corpus_help)
    out: str = option("", path=URI, help="output directory (created; re-running the same command resumes)")
    backend: str = option(
        "heuristic",
        choices=lambda: list(BACKENDS),
        help=lambda: "; ".join(f"{b.name}: {b.help}" for b in BACKENDS.values()),
    )
    prompt: str = option("structure_toc.txt", path=URI, help="structuring prompt: a name in prompts/ or a file path")
    limit: int | None = option(None, help="structure only the first N valid documents")
    on_bad_row: str = option(
        "error",
        choices=["error", "skip"],
        help="bad rows stop the job (error) or are recorded in bad_rows.parquet (skip)",
    )
    max_doc_chars: int = option(5_000_000, help="a longer document is a bad row (oversized text)")
    shard_docs: int = option(1000, help="rows per shard")
    workers: int | None = option(None, help="0: run in this process; N>=1: N Ray actors", shown="0 heuristic, 2 llm")
    ray_address: str | None = option(
        None, help="connect to this Ray cluster", shown="start a local Ray when workers >= 1"
    )
    max_shards_in_flight: int | None = option(None, help="shards queued or running at once", shown="2 x workers")
    worker_memory_gb: float = option(
        1.0,
        flag="--worker-memory",
        metavar="GB",
        help="memory Ray reserves per worker actor, so it places no more on a node than its memory holds (0: none)",
    )
    flush_docs: int = option(200, help="finished documents per checkpoint part")
    flush_seconds: float = option(
        5.0, help="a kill loses at most this many seconds of finished replies (measured from the oldest row)"
    )
    new_run: bool = option(
        False, help="start over when OUT holds a different run (old outputs kept under superseded-*/)"
    )
    index: bool = option(False, help="also build the BM25 index into OUT/index")
    progress: bool = option(True, help="no progress bar or lines")
    mode: str = option(
        "online",
        choices=["online", "batch"],
        help="llm backend: online (chat completions) or the OpenAI Batch API (half price)",
    )
    max_cost_usd: float | None = option(
        None,
        flag="--max-cost",
        metavar="USD",
        help="stop cleanly (exit code 3) before the run's total cost would pass USD; re-run with more to continue",
    )
    tier: str | None = option(
        None,
        flag="--llm-tier",
        metavar="RULE",
        path=URI,
        help="only these documents go to the LLM, the rest get the heuristic TOC: 'chars>=N' or a docid list file",
        shown="all",
    )
    columns: str = option("", metavar="FIELD=COL,...", help=COLUMNS_HELP)
    llm: LLMConfig = field(default_factory=LLMConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)

    def validate(self) -> None:
        if not self.corpus:
            raise ConfigError(f"corpus is required ({corpus_help()})")
        if not self.out:
            raise ConfigError("out is required (the output directory)")
        BACKENDS.lookup(self.backend)
        if self.on_bad_row not in ("error", "skip"):
            raise ConfigError(f"on_bad_row must be 'error' or 'skip', got {self.on_bad_row!r}")
        if self.limit is not None and self.limit <= 0:
            raise ConfigError(f"limit must be a positive integer, got {self.limit!r}")
        if self.shard_docs <= 0:
            raise ConfigError(f"shard_docs must be >= 1, got {self.shard_docs!r}")
        if self.workers is not None and self.workers < 0:
            raise ConfigError(f"workers must be >= 0, got {self.workers!r}")
        if self.flush_docs <= 0:
            raise ConfigError(f"flush_docs must be >= 1, got {self.flush_docs!r}")
        if not self.worker_memory_gb >= 0:  # also refuses NaN
            raise ConfigError(f"worker_memory_gb must be >= 0, got {self.worker_memory_gb!r}")
        if not self.flush_seconds > 0:  # also refuses NaN
            raise ConfigError(f"flush_seconds must be > 0, got {self.flush_seconds!r}")
        self.llm.validate()
        self.batch.validate()
        if self.mode not in ("online", "batch"):
            raise ConfigError(f"mode must be 'online' or 'batch', got {self.mode!r}")
        for name in ("mode", "tier"):
            if getattr(self, name) not in (None, "online") and not self.calls_llm:
                raise ConfigError(f"{name}={getattr(self, name)!r} needs backend 'llm' (got {self.backend!r})")
        if self.max_cost_usd is not None and self.max_cost_usd <= 0:
            raise ConfigError(f"max_cost_usd must be > 0, got {self.max_cost_usd!r}")
        if self.tier is not None:
            parse_tier(self.tier)
        try:
            canonical_columns(self.columns)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if self.calls_llm:
            self.llm.api_key()

    @property
    def calls_llm(self) -> bool:
        """The backend sends requests to an LLM (priced, rate-limited, keyed): rise_batch.registry.BACKENDS."""
        return BACKENDS[self.backend].calls_llm

    @property
    def n_workers(self) -> int:
        if self.workers is not None:
            return self.workers
        return BACKENDS[self.backend].default_workers


def run_hash(cfg: StructureConfig, prompt_text: str) -> str:
    """Everything that changes what a document becomes, and nothing else (so limits can change on resume)."""
    if not cfg.calls_llm:
        basis: dict[str, Any] = {"backend": cfg.backend, "version": HEURISTIC_VERSION}
    else:
        basis = {
            "backend": cfg.backend,
            "prompt": hashlib.sha256(prompt_text.encode()).hexdigest(),
            "model": cfg.llm.model,
            "reasoning_effort": cfg.llm.reasoning_effort,
            "max_output_tokens": cfg.llm.max_output_tokens,
            "reask": cfg.llm.reask,
            "max_input_chars": cfg.llm.max_input_chars,
        }
        if cfg.llm.max_input_tokens is not None:  # only when set: runs made before the setting keep their hash
            basis["max_input_tokens"] = cfg.llm.max_input_tokens
        if cfg.llm.structured_output:  # only when on: a run made before the setting hashes as one with it off
            basis["structured_output"] = True
        if cfg.tier is not None:  # which documents the LLM sees changes outputs; mode and cost limit do not
            basis["tier"] = parse_tier(cfg.tier).identity
    basis["max_doc_chars"] = cfg.max_doc_chars
    if canonical_columns(cfg.columns):  # only a mapping that changes what is read changes the hash
        basis["columns"] = canonical_columns(cfg.columns)
    return hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:16]


def build_section(cls: type, data: dict[str, Any], where: str) -> Any:
    """Dataclass from a mapping, refusing unknown keys (typos) and wrong types with the key's dotted name.

    Public because the run config (agent/run_config.py) and the sweep config (eval/sweep.py) build their sections
    with it too: one reader, one set of error messages."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    unknown = set(data) - known
    if unknown:
        raise ConfigError(f"unknown key(s) {sorted(unknown)} in {where or 'config'}; known: {sorted(known)}")
    kwargs: dict[str, Any] = {}
    paths = {f.name: f.metadata.get("path") for f in fields(cls)}
    for name, value in data.items():
        hint = hints[name]
        key = f"{where}.{name}" if where else name
        if dataclasses.is_dataclass(hint):
            kwargs[name] = build_section(hint, value or {}, key)
            continue
        # a URI where a local path must be: one line naming the key; file:// as the path it names
        kwargs[name] = checked_path(key, _coerce(value, hint, key), paths.get(name))
    return cls(**kwargs)


def _coerce(value: Any, hint: Any, key: str) -> Any:
    args = getattr(hint, "__args__", ())
    if value is None:
        if type(None) in args:
            return None
        raise ConfigError(f"{key} may not be null")
    base = next((a for a in args if a is not type(None)), hint) if args else hint
    if base is bool:
        if isinstance(value, bool):
            return value
    elif base is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif base is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):  # NaN passes every `<= 0` check and inf every upper bound: refused here
                raise ConfigError(f"{key} must be a finite number, got {value!r}")
            return float(value)
    elif base is str:
        if isinstance(value, (str, Path)):
            return str(value)
    else:
        return value
    raise ConfigError(f"{key} must be {getattr(base, '__name__', base)}, got {value!r}")


def section_mapping(data: dict[str, Any], key: str, where: str = "") -> dict[str, Any]:
    """`data[key]` as a mapping to merge flags into ({} when absent or null), or a ConfigError naming the key: a
    section given as a list or a number is refused before it is merged (`llm: [1, 2]` was a traceback)."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        name = f"{where}.{key}" if where else key
        raise ConfigError(f"{name} must be a mapping of settings, got {type(value).__name__} {value!r}")
    return value


CONFIG_MAX_BYTES = 4 << 20  # a config file of settings (a price table included) is kilobytes


def read_yaml_file(path: str | Path, what: str = "config") -> Any:
    """A YAML file the user names (a config, a sweep, a price table), opened as every file the engine reads
    (safe_read: below its own directory, no link followed, a regular file of at most CONFIG_MAX_BYTES), so a FIFO
    or /dev/zero is refused at once in one line naming it instead of hanging or filling the memory."""
    import yaml

    loc = location(path)  # a path or a URI (`s3://b/c.yaml` read as an object, `file://` as the path it names)
    try:
        if isinstance(loc, ObjectPath):  # object storage has no links or FIFOs; only the size needs a bound
            with open_binary(loc) as fh:
                data = fh.read(CONFIG_MAX_BYTES + 1)
            if len(data) > CONFIG_MAX_BYTES:
                raise RefusedFile(f"{redact(str(path))} is larger than {CONFIG_MAX_BYTES:,} bytes")
        else:
            data = read_regular_file(loc, below=loc.parent, max_bytes=CONFIG_MAX_BYTES)
        return yaml.safe_load(data.decode("utf-8"))
    except RefusedFile as e:
        raise ConfigError(f"cannot read {what}: {e}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        if isinstance(e, OSError) and storage_failure(e):  # unreachable storage: its own one line (errors.py)
            raise
        raise ConfigError(f"cannot read {what} {redact(str(path))}: {e}") from None


def read_yaml_section(path: str | Path | None, section: str) -> dict[str, Any]:
    """A config file's `section:` mapping, or the whole file when it has no such key; {} without a file."""
    if not path:
        return {}
    loaded = read_yaml_file(path) or {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected a mapping of settings, got {type(loaded).__name__}")
    if section not in loaded:
        return dict(loaded)
    value = loaded[section]
    if value is not None and not isinstance(value, dict):  # `run: [1]` was a TypeError traceback
        shown = repr(value) if len(repr(value)) <= 100 else repr(value)[:100] + "..."
        raise ConfigError(f"{path}: `{section}:` must be a mapping of settings, got {type(value).__name__} {shown}")
    return dict(value or {})


def load_structure_config(path: str | Path | None = None, **overrides: Any) -> StructureConfig:
    """YAML file (optional) then CLI overrides (None means 'not given'), then validation."""
    data = read_yaml_section(path, "structure")
    nested = ("llm_", "batch_")  # flag dests `llm_rpm`, `batch_retry` ... override keys of the nested sections
    data.update({k: v for k, v in overrides.items() if not k.startswith(nested) and v is not None})
    for prefix in nested:
        over = {k[len(prefix) :]: v for k, v in overrides.items() if k.startswith(prefix) and v is not None}
        if over:
            data[prefix[:-1]] = {**section_mapping(data, prefix[:-1]), **over}
    cfg = build_section(StructureConfig, data, "")
    cfg.validate()
    return cfg


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """The config as it is recorded (manifests, run.json): storage URIs without their credentials or options."""

    def clean(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        return redact(v) if isinstance(v, str) and is_uri(v) else v

    return clean(dataclasses.asdict(cfg))


def config_from_dict(data: dict[str, Any]) -> StructureConfig:
    return build_section(StructureConfig, data, "")
