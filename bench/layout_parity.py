"""Layout parity: normalised byte-level digests of every output of the pipeline, to prove a refactor changed nothing.

Why: a refactor that moves modules around (readers, scan, index plan, ...) must not change a single byte that the
pipeline writes. Unit tests check properties; this script checks the outputs themselves. `capture` runs the same
workloads against one checkout and records a digest of every file they write; `compare` diffs two captures (the
pre-refactor checkout against the refactored one). Two captures of the SAME checkout compare identical, so any
difference between two checkouts is a behaviour change.

    python bench/layout_parity.py capture --repo OLD_CHECKOUT --out parity/old
    python bench/layout_parity.py capture --repo . --out parity/new
    python bench/layout_parity.py compare parity/old/manifest.json parity/new/manifest.json [--json]

Workloads (every command is `python -m rise_batch.cli ...` in a subprocess with PYTHONPATH=REPO, cwd=REPO,
PYTHONHASHSEED=0, DISABLE_TQDM=1, NUMBA_CACHE_DIR under OUT so the checkout is not written to; outputs go to
OUT/outputs/, command logs to OUT/logs/):

  preflight         `import rise_batch` must resolve inside REPO (PYTHONPATH wins over the editable install); with
                    wiki2015 on, the 2,000-document input subset is built (first rows in sorted-file order).
  sample_heuristic  the bundled sample: `structure --backend heuristic --index --workers 0`; then corpus/ is
                    deleted and `materialize` re-creates it (it cannot write elsewhere): it must be identical.
  sample_llm        `structure --backend llm --workers 0` against `fake-llm` (started from REPO on a free loopback
                    port, stopped at the end).
  sample_llm_ray    the same with `--workers 2` (local Ray; a Ray task first checks that Ray workers import REPO's
                    package): its outputs must equal sample_llm's (only config.out/config.workers of manifest.json
                    may differ: they are the command's own inputs).
  sample_llm_batch  `structure --mode batch` (the fake server's Batch API: files, batches; 4 shards of 25 documents,
                    batch files of <= 30 requests, polled every 0.05 s), once clean and once with 20% of the batch
                    lines failed by the server (POST /v1/_batch_config p_line_error, a deterministic draw per
                    custom_id; reset to 0 after), which --batch-retry online (the default) redoes online. Checks:
                    both give sample_llm's corpus/ files and checkpoint rows, cost_usd aside (batch price).
  wiki_heuristic    2,000 wiki2015 documents: `structure --backend heuristic --index --workers 0`.
  wiki_llm          the same documents: `structure --backend llm --workers 0`.
  trajectories      `run` for rise, rise-bm25, retrieval-agent and dci (jobs/queries_demo.jsonl, workers 0) over the
                    structured sample, `judge` of each run dir, `report` over the four (all against fake-llm).
  trajectories_ray  `run --workers 2` (local Ray) for rise and dci into runs_ray/; checks: each run dir equals the
                    in-process one (its judgments/ aside; run.json may differ in config.out, config.workers and
                    config.llm.concurrency, which run_config derives from workers).
  judge_batch       `judge --mode batch` of runs_ray/rise (Batch API); check: its judgments equal the online
                    judgments of runs/rise except cost_usd, whose total is exactly half (batch price).

A file belongs to the workload that created it (e.g. `sample_heuristic/original/` is written by `run`, so it is
listed under trajectories). Digests are taken once, after the last workload, so they show the final state.

Normalisation (what is NOT compared, and why):

  * Placeholders: the absolute paths of OUT/outputs, OUT, REPO and the wiki2015 directory become <WORK>, <OUT>, <REPO>,
    <WIKI>; the fake server's `127.0.0.1:PORT` becomes <FAKE_LLM> (its port is picked free at run time). Applied to
    every JSON string, Parquet string cell and text file.
  * Timing keys, dropped recursively from JSON/JSONL and as Parquet columns: wall_seconds, shard_seconds, seconds,
    elapsed, elapsed_s, docs_per_second, created, started, finished, timestamp, timing (model_s/tool_s), t (event
    time), pid (worker process id in events), and a tool_call event's phases and thread (ms). Nothing else:
    tokens, costs, attempts, counts all stay.
  * stats/shard-N.json `parts` (newer checkouts): the checkpoint parts a done marker covers; how rows split into
    parts follows flush timing, and the parts themselves are compared merged.
  * manifest.json `plan_key.fingerprint`: a hash of the corpus files' resolved paths, sizes and mtimes (where and
    when the input was written, not what it holds; it differs between checkouts and between captures of the wiki
    subset). The content is covered by the index's content_sha256 and the digested rows and documents.
  * JSON floats are compared to 10 significant digits: per-shard cost_usd is a sum over checkpoint rows, whose order
    follows LLM reply order, so it differs in the last bit (0.25633485 vs 0.25633484999999995). Parquet cells
    (the per-document values those sums come from) are compared exactly.
  * JSON: parsed and re-serialised with sorted keys (object key order carries no meaning). Data files whose keys
    are corpus terms (the BM25 vocab.index.json, where "pid" and "timestamp" are words; docids.json) keep every
    key and float as is.
  * events.jsonl: lines are normalised, then sorted: trajectories run concurrently, so the interleaving of their
    events is scheduling, not behaviour (every event is still compared).
  * Parquet: schema (names and types) + rows as canonical JSON, sorted by the first key column present (docid,
    query_id, custom_id, relpath, source), ties by the whole row. The checkpoint parts of one shard
    (`checkpoint/shard-N.part-*.parquet`) are merged into one entry: with LLM concurrency the part a document lands
    in follows reply order, and a part is also cut every flush_seconds.
  * .npy: sha256 of the raw bytes (no normalisation at all: the BM25 arrays must match bit for bit).
  * .png: only that the file exists (matplotlib output is not the pipeline's behaviour).
  * Any other file: sha256 of its bytes, with the placeholders applied when it is UTF-8 text.
  * The fake server's prompt cache answers "cached" for a system prompt it has seen before, so the FIRST request of
    each prompt is uncached, and with concurrent requests which document is first is a race. Before the structure
    runs and before each system's `run`, a one-document warm-up (`--limit 1`, into OUT/outputs/warmup/) is sent, so
    every measured request is a cache hit and cached-token counts and costs are deterministic. The warm-ups are
    digested too (sequential, so deterministic).
  * The fake server's batch and file ids (`batch-fake000012`, `file-fake000007`, also inside the batch result
    lines' `batch_req_<batch id>_<n>`) are counters over everything that server process has made (with the real
    API they are random). In `batches.json` and `batches/*.jsonl` (structure and judge) each distinct id becomes
    <BATCH_n> / <FILE_n>, numbered by first appearance in the file: which batch links to which file, null ids,
    counts and statuses are all still compared. The batch objects' timestamps are not stored by the pipeline; the
    result lines' `created` is a timing key (above).
  * The fake server's stats (a check of the fake_llm workload): batch lines are logged per path `batch:<id>`; those
    become one `batch:*` total and the sorted list of lines per batch. The Batch API counters (files, batches,
    polls, downloads, lines answered/failed, statuses) are compared as they are.
  * stdout/stderr of the commands are kept in OUT/logs/ but not compared (they print timings); the manifest's
    `seconds`, `timings`, `repo` and `git_head` are informational too.

The manifest (OUT/manifest.json) holds, per workload, each command's argv and exit code, the checks (materialize,
in-process vs Ray, batch vs online, what the fake server received) and `files`: relative path under OUT/outputs ->
digest. `compare` reports every differing, missing and extra file per workload, differing exit codes and checks, a
summary line, and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

FORMAT = "rise_batch.layout_parity/1"
SCRIPT_REPO = Path(__file__).resolve().parents[1]
DEFAULT_WIKI = SCRIPT_REPO / "../shared/data/wiki2015"
SAMPLE = "rise_batch/data/enwiki_sample.jsonl.gz"
QUERIES = "jobs/queries_demo.jsonl"
SYSTEMS = ("rise", "rise-bm25", "retrieval-agent", "dci")
AGENT_MODEL = "gpt-5.4-mini"  # as in jobs/run_rise_fake.yaml
AGENT_FLAGS = "--rpm 6000 --tpm 100000000 --wall-clock-s 300 --index-backend numpy".split()
RAY_SYSTEMS = ("rise", "dci")  # `run --workers 2` on a local Ray, each compared with its in-process run
JUDGE_BATCH_SYSTEM = "rise"  # its Ray run dir is judged with `judge --mode batch`
# Batch API mode: 4 shards in 2 packs of 2 batch files each; the fake server completes a batch at its second poll
BATCH_FLAGS = "--mode batch --workers 0 --shard-docs 25 --batch-max-requests 30 --batch-poll-s 0.05".split()
BATCH_LINE_ERRORS = 0.2  # share of batch lines the fake server fails (a deterministic draw per custom_id)
LLM_LIMITS = ["--rpm", "100000", "--tpm", "100000000"]  # the fake server is free: do not wait on our own limiter
COMMAND_TIMEOUT_S = 900.0

TIMING_KEYS = frozenset(
    {
        "wall_seconds",
        "shard_seconds",
        "seconds",
        "elapsed",
        "elapsed_s",
        "docs_per_second",
        "created",
        "started",
        "finished",
        "timestamp",
        "timing",
        "t",
        "pid",
        "phases",  # events.jsonl tool_call: ms per phase of the call (issue 14)
        "thread",  # events.jsonl tool_call: the tool thread's CPU and run-queue ms
    }
)
FLOAT_DIGITS = 10  # JSON floats: sums over rows in LLM reply order differ in the last bit (see the docstring)
# dotted paths dropped from JSON files of that name, on top of the timing keys
# (stats.json "nodes": which Ray node ran how many shards names the node by its id, new at every Ray start)
SCOPED_DROPS = {"manifest.json": ("plan_key.fingerprint",), "stats.json": ("nodes",)}
# a shard's done marker lists the checkpoint parts it covers; how rows split into parts follows flush timing (every
# flush_seconds), like the parts themselves, which are digested merged (CHECKPOINT_PART): the list is not compared
DONE_MARKER = re.compile(r"(?:^|/)stats/shard-\d+\.json$")
MARKER_DROPS = ("parts",)
# JSON files that are data, not records: their keys are corpus terms ("pid", "timestamp" are words), never dropped
DATA_JSON = frozenset({"vocab.index.json", "docids.json"})
SORTED_JSONL = frozenset({"events.jsonl"})
PARQUET_KEYS = ("docid", "query_id", "custom_id", "relpath", "source")
CHECKPOINT_PART = re.compile(r"^(?P<head>(?:.*/)?checkpoint/shard-\d+)\.part-\d+\.parquet$")
RAY_PROBE = """
import sys
from pathlib import Path

import ray


@ray.remote
def where() -> str:
    import rise_batch

    return rise_batch.__file__


ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
Path(sys.argv[1]).write_text(ray.get(where.remote()))
ray.shutdown()
"""
# in-process vs Ray: the only differences allowed are the two flags that differ between the two commands
RAY_ALLOWED = {"manifest.json": ("config.out", "config.workers")}
# trajectories: also llm.concurrency, which run_config derives from workers (model calls per worker = 8 / workers)
RAY_RUN_ALLOWED = {"run.json": ("config.out", "config.workers", "config.llm.concurrency")}
# The fake server's batch and file ids (`batch-fake000012`, `file-fake000007`) count every batch and file the server
# process made so far (with the real API they are random): in batch manifests and batch result files each distinct id
# becomes <BATCH_n> / <FILE_n>, n in order of first appearance in that file, so links between ids are still compared.
BATCH_ID = re.compile(rb"\b(batch|file)-fake\d+\b")
BATCH_FILE = re.compile(r"(?:^|/)(?:batches\.json|batches/[^/]+\.jsonl)$")


# --------------------------------------------------------------------------------------------- normalisation


class Placeholders:
    """Absolute paths and the server address of one capture, replaced by stable names (longest first)."""

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        uniq = {old: new for old, new in pairs if old}
        self.pairs = sorted(uniq.items(), key=lambda p: -len(p[0]))
        self.bpairs = [(old.encode(), new.encode()) for old, new in self.pairs]

    def text(self, s: str) -> str:
        for old, new in self.pairs:
            if old in s:
                s = s.replace(old, new)
        return s

    def data(self, b: bytes) -> bytes:
        for old, new in self.bpairs:
            if old in b:
                b = b.replace(old, new)
        return b


def path_forms(p: Path) -> list[str]:
    """The path as given and as resolved (they differ under symlinks): both may appear in outputs."""
    return list(dict.fromkeys([str(p.absolute()), str(p.resolve())]))


def norm_json(obj: Any, ph: Placeholders, drop: Iterable[str] = (), where: str = "", records: bool = True) -> Any:
    """Placeholders in strings and keys; for records (not data files, not Parquet cells) also timing keys removed at
    any depth, the dotted paths in `drop` removed, and floats cut to FLOAT_DIGITS significant digits."""
    drop = tuple(drop)
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            dotted = f"{where}.{k}" if where else str(k)
            if records and (k in TIMING_KEYS or dotted in drop):
                continue
            out[ph.text(k) if isinstance(k, str) else k] = norm_json(v, ph, drop, dotted, records)
        return out
    if isinstance(obj, list):
        return [norm_json(v, ph, drop, where, records) for v in obj]
    if isinstance(obj, str):
        return ph.text(obj)
    if records and isinstance(obj, float):
        return float(f"{obj:.{FLOAT_DIGITS}g}")
    return obj


def relabel_batch_ids(raw: bytes) -> bytes:
    """Each distinct fake-server batch/file id -> <BATCH_n>/<FILE_n>, numbered per kind by first appearance."""
    seen: dict[bytes, bytes] = {}
    per_kind: dict[bytes, int] = {}

    def label(m: re.Match[bytes]) -> bytes:
        if m[0] not in seen:
            per_kind[m[1]] = per_kind.get(m[1], 0) + 1
            seen[m[0]] = b"<%s_%d>" % (m[1].upper(), per_kind[m[1]])
        return seen[m[0]]

    return BATCH_ID.sub(label, raw)


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data).hexdigest()


def read_raw(path: Path) -> bytes:
    raw = path.read_bytes()
    return relabel_batch_ids(raw) if BATCH_FILE.search(path.as_posix()) else raw


def digest_json(path: Path, ph: Placeholders, drop: Iterable[str] = ()) -> str:
    raw = read_raw(path)
    try:
        obj = json.loads(raw)
    except ValueError:
        return digest_bytes(raw, ph)
    records = path.name not in DATA_JSON
    drop = (*drop, *SCOPED_DROPS.get(path.name, ()))
    if DONE_MARKER.search(path.as_posix()):
        drop = (*drop, *MARKER_DROPS)
    return "json:" + sha(canonical(norm_json(obj, ph, drop, records=records)))


def digest_jsonl(path: Path, ph: Placeholders) -> str:
    lines = []
    raw = read_raw(path)
    for line in raw.splitlines():
        if not line.strip():
            continue
        try:
            lines.append(canonical(norm_json(json.loads(line), ph)))
        except ValueError:
            return digest_bytes(raw, ph)
    if path.name in SORTED_JSONL:
        lines.sort()
    return "jsonl:" + sha("\n".join(lines))


def digest_parquet(paths: list[Path], ph: Placeholders) -> str:
    """One logical table from one or more files: schema + rows, timing columns out, rows sorted by a key column."""
    tables = [pq.read_table(p) for p in paths]
    table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
    table = table.drop_columns([c for c in table.column_names if c in TIMING_KEYS])
    schema = [f"{f.name}:{f.type}" for f in table.schema]
    rows = [norm_json(r, ph, records=False) for r in table.to_pylist()]
    key = next((k for k in PARQUET_KEYS if k in table.column_names), None)
    if key is not None:
        pairs = sorted((canonical(r[key]), canonical(r)) for r in rows)
        body = [row for _, row in pairs]
    else:
        body = [canonical(r) for r in rows]  # no key: the order is the content
    return "parquet:" + sha("\n".join([canonical(schema), *body]))


def digest_bytes(raw: bytes, ph: Placeholders) -> str:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + sha(raw)
    return "text:" + sha(ph.data(raw))


def digest_file(path: Path, ph: Placeholders, drop: Iterable[str] = ()) -> str:
    name = path.name
    if name.endswith(".parquet"):
        return digest_parquet([path], ph)
    if name.endswith(".json"):
        return digest_json(path, ph, drop)
    if name.endswith(".jsonl"):
        return digest_jsonl(path, ph)
    if name.endswith(".npy"):
        return "npy:" + sha(path.read_bytes())
    if name.endswith(".png"):
        return "png:exists"
    return digest_bytes(path.read_bytes(), ph)


def list_files(root: Path) -> list[str]:
    if not root.is_dir():
        return []
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def digest_files(root: Path, rels: Iterable[str], ph: Placeholders, drop: dict[str, Iterable[str]] | None = None):
    """relpath -> digest for files under root; checkpoint parts of one shard become one merged entry."""
    drop = drop or {}
    out: dict[str, str] = {}
    parts: dict[str, list[Path]] = {}
    for rel in sorted(rels):
        m = CHECKPOINT_PART.match(rel)
        if m:
            parts.setdefault(m["head"] + ".part-*.parquet", []).append(root / rel)
            continue
        out[rel] = digest_file(root / rel, ph, drop.get(rel, ()))
    for rel, paths in parts.items():
        out[rel] = digest_parquet(paths, ph)
    return dict(sorted(out.items()))


def diff_digests(a: dict[str, str], b: dict[str, str]) -> dict[str, list[str]]:
    return {
        "differing": sorted(k for k in a.keys() & b.keys() if a[k] != b[k]),
        "missing": sorted(a.keys() - b.keys()),
        "extra": sorted(b.keys() - a.keys()),
    }


# --------------------------------------------------------------------------------------------- capture


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """SIGTERM then SIGKILL to the process group of a child this script started (Ray spawns its own children)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


class Capture:
    """One capture: the subprocess environment, the command log, file ownership per workload, the manifest."""

    def __init__(self, repo: Path, out: Path, wiki: Path | None) -> None:
        self.repo, self.out, self.wiki = repo, out, wiki
        self.work, self.logs = out / "outputs", out / "logs"
        self.work.mkdir(parents=True)
        self.logs.mkdir(parents=True)
        self.env = dict(os.environ)
        self.env.update(
            PYTHONPATH=str(repo),
            PYTHONHASHSEED="0",
            DISABLE_TQDM="1",
            PYTHONDONTWRITEBYTECODE="1",
            NUMBA_CACHE_DIR=str(out / "cache" / "numba"),
            RAY_USAGE_STATS_ENABLED="0",
        )
        no_proxy = ",".join(x for x in (os.environ.get("NO_PROXY"), "127.0.0.1,localhost") if x)
        self.env.update(NO_PROXY=no_proxy, no_proxy=no_proxy)
        pairs = [(f, "<WORK>") for f in path_forms(self.work)]
        pairs += [(f, "<OUT>") for f in path_forms(out)]
        pairs += [(f, "<REPO>") for f in path_forms(repo)]
        if wiki is not None:
            pairs += [(f, "<WIKI>") for f in path_forms(wiki)]
        self.base_pairs = pairs
        self.ph = Placeholders(pairs)
        self.workloads: dict[str, dict[str, Any]] = {}
        self.owner: dict[str, str] = {}
        self.server: subprocess.Popen | None = None
        self.base_url = ""
        self.timings: list[tuple[str, str, float]] = []

    # -- bookkeeping

    def workload(self, name: str) -> dict[str, Any]:
        return self.workloads.setdefault(name, {"commands": [], "checks": {}, "files": {}})

    def claim(self, name: str) -> None:
        """Files under work/ that no earlier workload created belong to `name`."""
        self.workload(name)
        for rel in list_files(self.work):
            self.owner.setdefault(rel, name)

    def check(self, workload: str, name: str, ok: bool, **detail: Any) -> bool:
        self.workload(workload)["checks"][name] = {"ok": bool(ok), **detail}
        print(f"[{workload}] check {name}: {'ok' if ok else 'FAILED'} {detail if not ok else ''}", file=sys.stderr)
        return ok

    def cli(self, workload: str, name: str, *args: str, timeout: float = COMMAND_TIMEOUT_S) -> int | str:
        return self.python(workload, name, ["-m", "rise_batch.cli", *args], timeout=timeout)

    def python(self, workload: str, name: str, argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> int | str:
        """Run `python ARGV` in REPO; record its argv (placeholders applied) and exit code ("timeout" if killed)."""
        t0 = time.monotonic()
        log = self.logs / f"{workload}.{name}.log"
        with log.open("wb") as fh:
            proc = subprocess.Popen(
                [sys.executable, *argv],
                cwd=self.repo,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                code: int | str = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                stop_process(proc, grace_s=5.0)
                code = "timeout"
        secs = time.monotonic() - t0
        self.workload(workload)["commands"].append(
            {"name": name, "argv": ["python", *(self.ph.text(a) for a in argv)], "exit_code": code}
        )
        self.timings.append((workload, name, round(secs, 2)))
        print(f"[{workload}] {name}: exit {code} in {secs:.1f}s", file=sys.stderr)
        return code

    # -- the fake server

    def allow_config(self) -> list[str]:
        """`--allow-config` where the checkout's fake server has it (newer ones refuse /v1/_config without it)."""
        out = subprocess.run(
            [sys.executable, "-m", "rise_batch.cli", "fake-llm", "--help"],
            cwd=self.repo,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        return ["--allow-config"] if "--allow-config" in out else []

    def start_server(self) -> None:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        for _ in range(5):
            port = free_port()
            log = (self.logs / "fake-llm.log").open("ab")
            proc = subprocess.Popen(
                [sys.executable, "-m", "rise_batch.cli", "fake-llm", "--port", str(port), *self.allow_config()],
                cwd=self.repo,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            log.close()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    with opener.open(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                        if r.status == 200:
                            self.server, self.base_url = proc, f"http://127.0.0.1:{port}/v1"
                            self.ph = Placeholders(
                                [
                                    *self.base_pairs,
                                    (f"127.0.0.1:{port}", "<FAKE_LLM>"),
                                    (f"localhost:{port}", "<FAKE_LLM>"),
                                ]
                            )
                            print(f"fake-llm up on port {port}", file=sys.stderr)
                            return
                except OSError:
                    time.sleep(0.1)
            stop_process(proc)  # lost the port to someone else, or never came up: try another one
        raise RuntimeError(f"fake-llm did not start; see {self.logs / 'fake-llm.log'}")

    def stop_server(self) -> None:
        if self.server is not None:
            stop_process(self.server)
            self.server = None

    def server_get(self, route: str) -> Any:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(f"{self.base_url}/{route}", timeout=10) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def batch_config(self, **settings: Any) -> dict[str, Any] | None:
        """Change the fake server's Batch API settings (POST /v1/_batch_config); returns them, None on failure."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        req = urllib.request.Request(
            f"{self.base_url}/_batch_config",
            data=json.dumps(settings).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with opener.open(req, timeout=10) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def server_stats(self) -> dict[str, Any] | None:
        """What the server received (requests by path and status, tokens, Batch API counters): deterministic once it
        is warmed up. Batch lines are logged under `batch:<batch id>`: those paths become one `batch:*` total and
        the sorted list of lines per batch (the ids are the server's counters, see BATCH_ID)."""
        s = self.server_get("_stats")
        if not isinstance(s, dict):
            return None
        keys = ("requests", "by_status", "by_fault", "prompt_tokens", "cached_tokens", "completion_tokens")
        out = {k: s.get(k) for k in keys}
        by_path = dict(s.get("by_path") or {})
        per_batch = sorted(by_path.pop(k) for k in [k for k in by_path if k.startswith("batch:")])
        out["by_path"] = by_path | ({"batch:*": sum(per_batch)} if per_batch else {})
        out["batch_lines_per_batch"] = per_batch
        batch = self.server_get("_batch_stats")
        out["batch_api"] = {k: v for k, v in batch.items() if k != "settings"} if isinstance(batch, dict) else None
        return out

    # -- digests

    def digest_all(self) -> None:
        by_owner: dict[str, list[str]] = {}
        for rel in list_files(self.work):
            by_owner.setdefault(self.owner.get(rel, "unclaimed"), []).append(rel)
        for name, rels in by_owner.items():
            self.workload(name)["files"] = digest_files(self.work, rels, self.ph)


def build_wiki_subset(wiki: Path, n: int, dest: Path) -> tuple[Path, int]:
    """The corpus to structure: WIKI itself when it has <= n rows, else its first n rows in sorted-file order."""
    files = sorted(wiki.glob("*.parquet")) if wiki.is_dir() else [wiki]
    if not files:
        raise SystemExit(f"layout_parity: no Parquet files in {wiki}")
    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    if total <= n:
        return wiki, total
    batches: list[pa.RecordBatch] = []
    need = n
    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=min(need, 1024)):
            batches.append(batch.slice(0, need))
            need -= min(need, batch.num_rows)
            if need == 0:
                break
        if need == 0:
            break
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "part-00000.parquet"
    pq.write_table(pa.Table.from_batches(batches), path)
    return path, n


def structure_args(corpus: str, out: Path, backend: str, *extra: str) -> list[str]:
    return ["structure", "--corpus", corpus, "--out", str(out), "--backend", backend, *extra]


def run_preflight(cap: Capture, wiki_docs: int) -> str | None:
    """The package must come from REPO, not from the editable install; returns the wiki2015 corpus to structure."""
    w = "preflight"
    probe = "import rise_batch, sys; sys.stdout.write(rise_batch.__file__)"
    res = subprocess.run(
        [sys.executable, "-c", probe], cwd=cap.repo, env=cap.env, capture_output=True, text=True, check=False
    )
    module = Path(res.stdout.strip()) if res.returncode == 0 and res.stdout.strip() else None
    inside = module is not None and module.resolve().is_relative_to(cap.repo)
    if not cap.check(w, "imports_from_repo", inside, module=cap.ph.text(str(module)) if module else None):
        raise SystemExit(
            f"layout_parity: `import rise_batch` does not resolve inside {cap.repo}: {res.stdout}{res.stderr}"
        )
    wiki_corpus = None
    if cap.wiki is not None:
        path, n = build_wiki_subset(cap.wiki, wiki_docs, cap.work / "inputs" / f"wiki2015-{wiki_docs}")
        wiki_corpus = str(path)
        cap.check(w, "wiki_subset", n == wiki_docs or path == cap.wiki, docs=n, corpus=cap.ph.text(wiki_corpus))
    cap.claim(w)
    return wiki_corpus


def run_sample_heuristic(cap: Capture, docs: Path) -> None:
    """Heuristic structure + index of the sample; then corpus/ deleted and re-created by `materialize`."""
    w = "sample_heuristic"
    cap.cli(w, "structure", *structure_args(SAMPLE, docs, "heuristic", "--index", "--workers", "0"))
    corpus = docs / "corpus"
    before = digest_files(corpus, list_files(corpus), cap.ph)
    shutil.rmtree(corpus, ignore_errors=True)
    cap.cli(w, "materialize", "materialize", str(docs))
    after = digest_files(corpus, list_files(corpus), cap.ph)
    d = diff_digests(before, after)
    cap.check(w, "materialize_identical", bool(before) and not any(d.values()), files=len(before), **d)
    cap.claim(w)


def run_sample_llm(cap: Capture) -> None:
    """LLM structure of the sample in process, then on a local Ray with 2 workers: the outputs must be equal."""
    llm = ["--base-url", cap.base_url, *LLM_LIMITS]
    w = "sample_llm"
    warm = structure_args(SAMPLE, cap.work / "warmup" / "structure_llm", "llm", "--workers", "0", "--limit", "1")
    cap.cli(w, "warmup", *warm, *llm)
    local = cap.work / "sample_llm"
    cap.cli(w, "structure", *structure_args(SAMPLE, local, "llm", "--workers", "0"), *llm)
    cap.claim(w)

    w = "sample_llm_ray"
    probe_out = cap.logs / "ray_probe.txt"
    cap.python(w, "ray_probe", ["-c", RAY_PROBE, str(probe_out)])
    module = Path(probe_out.read_text().strip()) if probe_out.is_file() else None
    inside = module is not None and module.resolve().is_relative_to(cap.repo)
    cap.check(w, "ray_imports_from_repo", inside, module=cap.ph.text(str(module)) if module else None)
    ray = cap.work / "sample_llm_ray"
    cap.cli(w, "structure", *structure_args(SAMPLE, ray, "llm", "--workers", "2"), *llm)
    a = digest_files(local, list_files(local), cap.ph, RAY_ALLOWED)
    b = digest_files(ray, list_files(ray), cap.ph, RAY_ALLOWED)
    d = diff_digests(a, b)
    allowed = [f"{f}: {', '.join(keys)}" for f, keys in RAY_ALLOWED.items()]
    cap.check(w, "equal_to_in_process", bool(a) and not any(d.values()), files=len(a), allowed=allowed, **d)
    cap.claim(w)


def checkpoint_rows(root: Path) -> dict[str, dict[str, Any]]:
    """docid -> checkpoint row, over every part of every shard."""
    rows: dict[str, dict[str, Any]] = {}
    for part in sorted((root / "checkpoint").glob("shard-*.part-*.parquet")):
        rows.update((r["docid"], r) for r in pq.read_table(part).to_pylist())
    return rows


def check_batch_vs_online(cap: Capture, w: str, name: str, batch: Path, online: Path) -> None:
    """Batch mode must give the online run's documents and checkpoint rows; only cost_usd may differ (batch lines
    are billed at the Batch API's half price, lines retried online at the online price)."""
    corpus_a = digest_files(online / "corpus", list_files(online / "corpus"), cap.ph)
    corpus_b = digest_files(batch / "corpus", list_files(batch / "corpus"), cap.ph)
    d = diff_digests(corpus_a, corpus_b)
    rows_a, rows_b = checkpoint_rows(online), checkpoint_rows(batch)
    fields: dict[str, int] = {}
    for docid in rows_a.keys() & rows_b.keys():
        for k in rows_a[docid].keys() | rows_b[docid].keys():
            if k != "cost_usd" and rows_a[docid].get(k) != rows_b[docid].get(k):
                fields[k] = fields.get(k, 0) + 1
    ids = {"docs_missing": len(rows_a.keys() - rows_b.keys()), "docs_extra": len(rows_b.keys() - rows_a.keys())}
    costs = {
        "cost_usd_online": round(sum(r["cost_usd"] for r in rows_a.values()), 10),
        "cost_usd_batch": round(sum(r["cost_usd"] for r in rows_b.values()), 10),
    }
    ok = bool(corpus_a) and bool(rows_a) and not any(d.values()) and not fields and not any(ids.values())
    cap.check(w, name, ok, files=len(corpus_a), docs=len(rows_a), differing_fields=fields, **ids, **costs, **d)


def run_sample_llm_batch(cap: Capture) -> None:
    """`structure --mode batch` of the sample (Batch API of the fake server), clean and with failed batch lines
    (retried online, the default --batch-retry): documents and rows must equal the online run's."""
    w = "sample_llm_batch"
    llm = ["--base-url", cap.base_url, *LLM_LIMITS]
    clean = cap.work / "sample_llm_batch"
    cap.cli(w, "structure", *structure_args(SAMPLE, clean, "llm", *BATCH_FLAGS), *llm)
    check_batch_vs_online(cap, w, "equal_to_online", clean, cap.work / "sample_llm")
    settings = cap.batch_config(p_line_error=BATCH_LINE_ERRORS)
    cap.check(w, "line_errors_set", settings is not None and settings.get("p_line_error") == BATCH_LINE_ERRORS)
    faulty = cap.work / "sample_llm_batch_line_errors"
    try:
        cap.cli(w, "structure-line-errors", *structure_args(SAMPLE, faulty, "llm", *BATCH_FLAGS), *llm)
    finally:
        reset = cap.batch_config(p_line_error=0.0)
    cap.check(w, "line_errors_reset", reset is not None and reset.get("p_line_error") == 0.0)
    check_batch_vs_online(cap, w, "line_errors_equal_to_online", faulty, cap.work / "sample_llm")
    cap.claim(w)


def run_wiki(cap: Capture, corpus: str) -> None:
    w = "wiki_heuristic"
    cap.cli(w, "structure", *structure_args(corpus, cap.work / w, "heuristic", "--index", "--workers", "0"))
    cap.claim(w)
    w = "wiki_llm"
    llm = ["--base-url", cap.base_url, *LLM_LIMITS]
    cap.cli(w, "structure", *structure_args(corpus, cap.work / w, "llm", "--workers", "0"), *llm)
    cap.claim(w)


def agent_flags(cap: Capture, docs: Path, workers: int) -> list[str]:
    flags = ["--queries", QUERIES, "--docs", str(docs), "--index", str(docs / "index"), *AGENT_FLAGS]
    return [*flags, "--workers", str(workers), "--model", AGENT_MODEL, "--base-url", cap.base_url]


def run_trajectories(cap: Capture, docs: Path) -> None:
    """`run` per system (after its warm-up), `judge` per run dir, one `report` over all of them."""
    w = "trajectories"
    flags = agent_flags(cap, docs, 0)
    run_dirs = []
    for system in SYSTEMS:
        warm = cap.work / "warmup" / f"run-{system}"
        cap.cli(w, f"warmup-{system}", "run", "--system", system, *flags, "--out", str(warm), "--limit", "1")
        run_dir = cap.work / "runs" / system
        cap.cli(w, f"run-{system}", "run", "--system", system, *flags, "--out", str(run_dir))
        run_dirs.append(str(run_dir))
    for system, run_dir in zip(SYSTEMS, run_dirs, strict=True):
        cap.cli(w, f"judge-{system}", "judge", run_dir, "--model", AGENT_MODEL, "--base-url", cap.base_url)
    cap.cli(w, "report", "report", *run_dirs, "--out", str(cap.work / "report"))
    cap.claim(w)


def run_trajectories_ray(cap: Capture, docs: Path) -> None:
    """`run --workers 2` (local Ray) per RAY_SYSTEMS; each run dir must equal the in-process one (trajectories
    workload; its judgments/ are left out: the Ray run dirs are not judged online)."""
    w = "trajectories_ray"
    flags = agent_flags(cap, docs, 2)
    for system in RAY_SYSTEMS:
        run_dir = cap.work / "runs_ray" / system
        cap.cli(w, f"run-{system}", "run", "--system", system, *flags, "--out", str(run_dir))
        local = cap.work / "runs" / system
        rels = [r for r in list_files(local) if not r.startswith("judgments/")]
        a = digest_files(local, rels, cap.ph, RAY_RUN_ALLOWED)
        b = digest_files(run_dir, list_files(run_dir), cap.ph, RAY_RUN_ALLOWED)
        d = diff_digests(a, b)
        allowed = [f"{f}: {', '.join(keys)}" for f, keys in RAY_RUN_ALLOWED.items()]
        ok = bool(a) and not any(d.values())
        cap.check(w, f"{system}_equal_to_in_process", ok, files=len(a), allowed=allowed, **d)
    cap.claim(w)


def run_judge_batch(cap: Capture) -> None:
    """`judge --mode batch` of one Ray run dir: the judgments must equal the online judgments of the same system's
    in-process run (same trajectories, checked above) except cost_usd, which is the Batch API's half price."""
    w = "judge_batch"
    run_dir = cap.work / "runs_ray" / JUDGE_BATCH_SYSTEM
    argv = ["judge", str(run_dir), "--model", AGENT_MODEL, "--base-url", cap.base_url, "--mode", "batch"]
    cap.cli(w, f"judge-{JUDGE_BATCH_SYSTEM}", *argv, "--poll-s", "0.05")
    online = cap.work / "runs" / JUDGE_BATCH_SYSTEM / "judgments"
    a = {p.name: json.loads(p.read_text()) for p in sorted(online.glob("*.json"))}
    b = {p.name: json.loads(p.read_text()) for p in sorted((run_dir / "judgments").glob("*.json"))}

    def strip(j: dict[str, Any]) -> Any:
        return norm_json({k: v for k, v in j.items() if k != "cost_usd"}, cap.ph)

    differing = sorted(k for k in a.keys() & b.keys() if strip(a[k]) != strip(b[k]))
    online_usd = round(sum(j.get("cost_usd") or 0.0 for j in a.values()), 10)
    batch_usd = round(sum(j.get("cost_usd") or 0.0 for j in b.values()), 10)
    half = abs(2 * batch_usd - online_usd) <= 1e-9 * max(online_usd, 1e-12)
    ok = bool(a) and a.keys() == b.keys() and not differing and half
    detail = {"judgments": len(b), "missing": sorted(a.keys() - b.keys()), "extra": sorted(b.keys() - a.keys())}
    detail |= {"differing": differing, "cost_usd_online": online_usd, "cost_usd_batch": batch_usd}
    cap.check(w, "equal_to_online_at_half_cost", ok, **detail)
    cap.claim(w)


def capture(args: argparse.Namespace) -> int:
    repo = Path(args.repo).resolve()
    out = Path(args.out).absolute()
    if not (repo / "rise_batch" / "__init__.py").is_file():
        raise SystemExit(f"layout_parity: {repo} is not a rise_batch checkout (no rise_batch/__init__.py)")
    if out.exists() and any(out.iterdir()):
        if not args.force:
            raise SystemExit(f"layout_parity: {out} is not empty (a re-run would resume old outputs); use --force")
        for name in ("outputs", "logs", "cache", "manifest.json"):
            p = out / name
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    wiki = Path(args.wiki).resolve() if args.wiki_docs > 0 else None
    if wiki is not None and not wiki.exists():
        raise SystemExit(f"layout_parity: wiki2015 data not found at {wiki} (--wiki DIR, or --wiki-docs 0 to skip)")
    t_start = time.monotonic()
    cap = Capture(repo, out, wiki)
    wiki_corpus = run_preflight(cap, args.wiki_docs)
    sample_docs = cap.work / "sample_heuristic"
    run_sample_heuristic(cap, sample_docs)
    try:
        cap.start_server()
    except RuntimeError as e:  # recorded; the workloads that need the server are then missing from the manifest
        cap.check("fake_llm", "started", False, error=str(e))
    else:
        try:
            cap.check("fake_llm", "started", True)
            run_sample_llm(cap)
            run_sample_llm_batch(cap)
            if wiki_corpus is not None:
                run_wiki(cap, wiki_corpus)
            run_trajectories(cap, sample_docs)
            run_trajectories_ray(cap, sample_docs)
            run_judge_batch(cap)
            stats = cap.server_stats()
            cap.check("fake_llm", "server_stats", stats is not None, **(stats or {}))
        finally:
            cap.stop_server()

    cap.digest_all()
    seconds = round(time.monotonic() - t_start, 1)
    manifest = {
        "format": FORMAT,
        "repo": str(repo),
        "git_head": git_head(repo),
        "python": sys.version.split()[0],
        "wiki_docs": args.wiki_docs if wiki is not None else 0,
        "seconds": seconds,
        "timings": [{"workload": a, "command": b, "seconds": c} for a, b, c in cap.timings],
        "workloads": cap.workloads,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    n_files = sum(len(v["files"]) for v in cap.workloads.values())
    bad = [
        f"{w}:{c['name']}={c['exit_code']}" for w, v in cap.workloads.items() for c in v["commands"] if c["exit_code"]
    ]
    failed = [f"{w}:{k}" for w, v in cap.workloads.items() for k, c in v["checks"].items() if not c["ok"]]
    print(
        f"capture: {len(cap.workloads)} workloads, {n_files} digests, failed commands {bad or 'none'}, "
        f"failed checks {failed or 'none'}, {seconds:.0f}s -> {out / 'manifest.json'}"
    )
    return 1 if bad or failed else 0


def git_head(repo: Path) -> str | None:
    res = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return res.stdout.strip() or None


# --------------------------------------------------------------------------------------------- compare


def compare(args: argparse.Namespace) -> int:
    pa_, pb = Path(args.a), Path(args.b)
    a, b = json.loads(pa_.read_text()), json.loads(pb.read_text())
    for m, p in ((a, pa_), (b, pb)):
        if m.get("format") != FORMAT:
            raise SystemExit(f"layout_parity: {p} is not a {FORMAT} manifest")
    wa, wb = a["workloads"], b["workloads"]
    summary: dict[str, Any] = {"a": str(pa_), "b": str(pb), "workloads": {}}
    totals = {"files": 0, "differing": 0, "missing": 0, "extra": 0, "exit_codes": 0, "checks": 0, "workloads": 0}
    for name in sorted(wa.keys() | wb.keys()):
        if name not in wa or name not in wb:
            where = "B" if name not in wb else "A"
            print(f"{name}: workload missing in {where}")
            totals["workloads"] += 1
            summary["workloads"][name] = {"missing_in": where}
            continue
        fa, fb = wa[name]["files"], wb[name]["files"]
        d = diff_digests(fa, fb)
        ca = {c["name"]: c["exit_code"] for c in wa[name]["commands"]}
        cb = {c["name"]: c["exit_code"] for c in wb[name]["commands"]}
        codes = sorted(k for k in ca.keys() | cb.keys() if ca.get(k, "absent") != cb.get(k, "absent"))
        ka, kb = wa[name]["checks"], wb[name]["checks"]
        checks = sorted(k for k in ka.keys() | kb.keys() if ka.get(k) != kb.get(k))
        totals["files"] += len(fa.keys() | fb.keys())
        for k in ("differing", "missing", "extra"):
            totals[k] += len(d[k])
        totals["exit_codes"] += len(codes)
        totals["checks"] += len(checks)
        same = not any(d.values()) and not codes and not checks
        print(f"{name}: {len(fa)} files, {len(ca)} commands, {len(ka)} checks: {'identical' if same else 'DIFFERENT'}")
        for rel in d["differing"]:
            print(f"  differs      {rel}\n               A {fa[rel]}\n               B {fb[rel]}")
        for rel in d["missing"]:
            print(f"  missing in B {rel}")
        for rel in d["extra"]:
            print(f"  only in B    {rel}")
        for k in codes:
            print(f"  exit code    {k}: A {ca.get(k, 'absent')}  B {cb.get(k, 'absent')}")
        for k in checks:
            pad = " " * 15
            print(f"  check        {k}:\n{pad}A {json.dumps(ka.get(k))}\n{pad}B {json.dumps(kb.get(k))}")
        summary["workloads"][name] = {**d, "exit_codes": codes, "checks": checks, "identical": same}
    differences = sum(v for k, v in totals.items() if k != "files")
    summary |= {"totals": totals, "identical": differences == 0}
    print(
        f"compare: {'IDENTICAL' if differences == 0 else 'DIFFERENT'}: {totals['files']} files in "
        f"{len(wa.keys() | wb.keys())} workloads; differing {totals['differing']}, missing {totals['missing']}, "
        f"extra {totals['extra']}, exit codes {totals['exit_codes']}, checks {totals['checks']}, "
        f"workloads missing {totals['workloads']}"
    )
    if args.json is not None:
        dest = Path(args.json) if args.json else pb.parent / "compare.json"
        dest.write_text(json.dumps(summary, indent=1) + "\n")
        print(f"compare: wrote {dest}")
    return 0 if differences == 0 else 1


# --------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser(
        "capture",
        help="run every workload against a checkout and write OUT/manifest.json",
        description="Run the workloads against the checkout at --repo and write normalised digests of every output.",
    )
    c.add_argument("--repo", required=True, help="checkout to run (its rise_batch/ is put first on PYTHONPATH)")
    c.add_argument("--out", required=True, help="capture directory: work/, logs/ and manifest.json go there")
    c.add_argument(
        "--wiki",
        default=str(DEFAULT_WIKI),
        help="wiki2015 Parquet file or directory (default: ../shared/data/wiki2015 next to this script's checkout)",
    )
    c.add_argument(
        "--wiki-docs", type=int, default=2000, help="wiki2015 documents to structure (first N rows; 0 skips them)"
    )
    c.add_argument("--force", action="store_true", help="delete an earlier capture in --out first")
    c.set_defaults(func=capture)
    p = sub.add_parser(
        "compare",
        help="diff two manifests; exit 1 on any difference",
        description="Print every differing, missing or extra file, exit code and check per workload; exit 1 if any.",
    )
    p.add_argument("a", metavar="A/manifest.json", help="reference capture (e.g. the pre-refactor checkout)")
    p.add_argument("b", metavar="B/manifest.json", help="capture to check against it")
    p.add_argument(
        "--json",
        nargs="?",
        const="",
        default=None,
        metavar="FILE",
        help="also write a JSON summary (default FILE: compare.json next to B's manifest)",
    )
    p.set_defaults(func=compare)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
