"""A trajectory run: pin the run directory, skip finished queries, run the rest (in process or on Ray), sum up.

The run directory is the hand-off to the judge and the report (format in the helper brief): run.json pins the
configuration hash, and each query's trajectory file carries it too, so a re-run skips exactly the queries already
answered under the same configuration. A run directory holding another configuration is refused unless the user
asks for a new run (the old files are then kept under superseded-*/, they were paid for).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

from rise_batch.agent.inputs import check_sources
from rise_batch.agent.pilot import pilot_sample, require_plan_price, run_plan
from rise_batch.agent.run_config import RunConfig, config_hash
from rise_batch.agent.run_stats import TRANSPORT_KEYS, RunStats, WorkerReport, cache_by_node, cache_line
from rise_batch.agent.run_tables import derive_for_run
from rise_batch.agent.runner import EVENT_PARTS, EVENTS, TRAJECTORIES, finished, trajectory_path
from rise_batch.agent.stage import STUCK_WHY, TrajectoryOutcomes
from rise_batch.agent.systems import get_system
from rise_batch.agent.views import VIEWS, user_copy, view_docs
from rise_batch.agent.workspace_root import claim_workspace_root
from rise_batch.config import ConfigError, config_to_dict
from rise_batch.counters import add_counts
from rise_batch.dirlock import claim, holding
from rise_batch.errors import RunIncomplete, StorageError, with_result
from rise_batch.executor import executor_for
from rise_batch.executor.base import MapOptions, Stage, WorkerSpec
from rise_batch.executor.probe import REMEDY, Input, Output, check_storage, node_labels
from rise_batch.index.tables import read_docids
from rise_batch.io import make_output_dir, read_json, supersede, write_json_atomic
from rise_batch.llm.cost_cap import CostCap
from rise_batch.llm.errors import KeyRefused
from rise_batch.llm.spend import BudgetExceeded, CostLimitReached, require_cap_price
from rise_batch.money.spent import audit as spend_audit
from rise_batch.money.spent import record_problems, spent_usd
from rise_batch.progress import Progress as Shown
from rise_batch.prompts import load_prompt, prompt_hash
from rise_batch.queries import Query, gold_label, read_queries, select_gold
from rise_batch.space.docstore import load_docmap
from rise_batch.space.sandbox import probe
from rise_batch.storage import AnyPath, ObjectPath, location, redact

RUN_JSON = "run.json"
SUPERSEDED = (RUN_JSON, TRAJECTORIES, "judgments", EVENTS, EVENT_PARTS)


class RunPlan(NamedTuple):
    cfg: RunConfig  # with the docs each system reads resolved
    config_hash: str
    queries: list[Query]
    pending: list[Query]
    sources_checked_s: float = 0.0  # the driver's check of inputs in object storage (check_sources), before any node


def prepare_run(cfg: RunConfig) -> RunPlan:
    system = get_system(cfg.system)
    prompt_text = load_prompt(system.prompt)
    ch = config_hash(cfg, prompt_text)
    out = location(cfg.out)
    make_output_dir(out)  # removed again if the run fails before writing into it (errors.run_main)
    claim(out)  # one writer: a second command on this directory is refused until this one ends
    meta_path = out / RUN_JSON
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if meta_path.exists():
        meta = read_json(meta_path)
        if meta.get("config_hash") == ch:
            created = meta.get("created", created)
        elif not cfg.new_run:
            raise ConfigError(
                f"{out} holds a run with another configuration (config hash {meta.get('config_hash')}, "
                f"system {meta.get('system')}, model {meta.get('model')}; now {ch}). Re-run with the original "
                "settings to resume, pass --new-run to start over (old files kept under superseded-*/), or choose "
                "another --out."
            )
        else:
            dest = supersede(out, SUPERSEDED)
            print(f"rise-batch run: previous run moved to {dest}", file=sys.stderr)
    # an index or docs in object storage: whole here; each worker's node makes its own copy (agent/inputs.py)
    checked = time.monotonic()
    check_sources(cfg, system.uses_index)
    checked = time.monotonic() - checked
    if not isinstance(location(cfg.docs), ObjectPath) and not Path(cfg.docs).is_dir():
        raise ConfigError(f"docs directory {cfg.docs} does not exist")
    if system.uses_index and cfg.index:
        refuse_foreign_index(cfg.index, cfg.docs)  # before any model call: every hit would be a missing file
    if cfg.workers > 0:
        check_nodes_storage(cfg, system)
    if system.uses_sandbox and not cfg.allow_unsandboxed:
        if not probe().ok:  # refuse up front rather than fail every trajectory
            raise ConfigError(f"{probe().reason}; the {system.name} agent's bash needs it (or --unsandboxed)")
    if not isinstance(location(cfg.docs), ObjectPath):  # in object storage, each node derives its own
        cfg = build_views(cfg, system.view)
    derive_for_run(cfg, system.uses_index)  # tables missing or stale: derived here, never in a trajectory actor
    queries = select_gold(read_queries(cfg.queries, cfg.limit), cfg.gold, cfg.qrels, cfg.queries)
    claim_workspace_root(cfg.workspace_dir, out, default=cfg.workspace_root is None)  # refused before any write
    write_json_atomic(
        meta_path,
        {
            "system": cfg.system,
            "model": cfg.llm.model,
            "config": config_to_dict(cfg),
            "config_hash": ch,
            "prompt": system.prompt,  # the agent's system prompt file (prompts/) and the hash of its text
            "prompt_hash": prompt_hash(prompt_text),
            "queries": redact(cfg.queries),
            "gold": gold_label(cfg.gold, cfg.qrels),
            "k": cfg.k,
            "created": created,
        },
    )
    (out / TRAJECTORIES).mkdir(exist_ok=True)
    pending = [q for q in queries if not finished(out, q.query_id, ch)]
    waiting = {q.query_id for q in pending}
    regold = refresh_gold(out, [q for q in queries if q.query_id not in waiting])
    if regold:
        print(f"rise-batch run: {regold} finished trajectories now carry {gold_label(cfg.gold, cfg.qrels)}")
    return RunPlan(cfg, ch, queries, pending, round(checked, 3))


def build_views(cfg: RunConfig, view: Any) -> RunConfig:
    """Build, once here before any worker starts, the views derived from DOCS that the system reads (its view and
    the one its entries point into); a view with an option of its own (--original-docs) records the built copy
    there, so run.json names the files the agent read."""
    for v in (view, *([VIEWS.lookup(view.lines_of)] if view.lines_of else [])):
        if user_copy(v, cfg) is None and v.build is not None:
            built = str(view_docs(v, cfg.docs, workers=max(cfg.workers, 1)))
            if v.option and not getattr(cfg, v.option):
                cfg = dataclasses.replace(cfg, **{v.option: built})
    return cfg


def check_nodes_storage(cfg: RunConfig, system: Any) -> None:
    """On a cluster, every node must write the run directory this driver reads and read the docs and index it
    read (a per-node copy of those is fine): probed once before the first query (executor/probe.py)."""
    inputs = [Input("the docs directory (--docs)", cfg.docs, "docs")]
    if system.uses_index and cfg.index:
        inputs.append(Input("the index (--index)", cfg.index, "index"))
    own = user_copy(system.view, cfg)
    if own:
        flag = "--" + str(system.view.option).replace("_", "-")
        inputs.append(Input(f"the {system.view.name} docs ({flag})", own, "docs"))
    lent = (cfg.llm.api_key_env,)  # what run_queries lends the actors (the probe connects first)
    check_storage(cfg.ray_address, [Output("the run directory (--out)", cfg.out)], inputs, env=lent)


def refresh_gold(out: AnyPath, done: list[Query]) -> int:
    """Give finished trajectories this run's gold; returns how many changed. The agent never sees the gold, so a
    resume with another --gold, --qrels or corrected query file changes only that field, and gold_R in every
    trajectory means the gold asked for, not a mix of two choices."""
    changed = 0
    for q in done:
        path = trajectory_path(out, q.query_id)
        t = read_json(path)
        if t.get("gold_doc_ids") != list(q.gold_doc_ids):
            write_json_atomic(path, {**t, "gold_doc_ids": list(q.gold_doc_ids)})
            changed += 1
    return changed


def refuse_foreign_index(index_dir: str | Path, docs_dir: str | Path) -> None:
    """Refuse an index built over another corpus than the docs directory's: every hit of such a run reads "file
    missing from the docs directory" and each trajectory is paid for anyway. The measure is the documents
    themselves (the index's docids.json against the docs' docmap.parquet), which also catches an index over a
    larger slice of the same corpus; the corpus paths both sides recorded are named to show where each came from."""
    try:
        index = location(index_dir)  # a local docids.json: read with the size meta.json records as its bound
        docids = read_json(index / "docids.json") if isinstance(index, ObjectPath) else read_docids(index)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{index_dir} is not an index of `rise-batch index` (no readable docids.json: {e})") from e
    known = load_docmap(docs_dir)
    missing = [d for d in docids if d not in known]
    if not missing:
        return

    def corpus_of(path: AnyPath, key: str) -> str:
        try:
            value = read_json(path)
            return str(value.get("corpus", {}).get("path") if key == "meta" else value.get("corpus"))
        except (OSError, ValueError, AttributeError):
            return "unknown"

    raise ConfigError(
        f"the index {index_dir} (corpus {corpus_of(location(index_dir) / 'meta.json', 'meta')}) and the docs "
        f"directory {docs_dir} (corpus {corpus_of(location(docs_dir) / 'manifest.json', 'manifest')}) do not hold "
        f"the same documents: {len(missing):,} of the index's {len(docids):,} docids are not in "
        f"{docs_dir}/docmap.parquet (first: {missing[0]!r}). Build the index over the docs' own corpus "
        "(`rise-batch structure --index` writes DOCS/index) or pass the matching --docs"
    )


class Progress:
    """Queries done / running / failed, tokens and dollars so far, shown by rise_batch.progress (a bar on a terminal,
    a line every --progress-every seconds elsewhere). The stage's hooks call started / stopped / finished.

    The line is named for the command that runs (`run`, `sweep`), counts the queries finished before this run apart,
    and shows the dollars: what the output directory had spent before (`spent_before`, judge included) plus this
    run's, the --max-cost `cap` when there is one and the total projected at this run's cost per query."""

    def __init__(
        self,
        total: int,
        already: int,
        enabled: bool = True,
        every_s: float | None = None,
        *,
        command: str = "run",
        spent_before: float = 0.0,
        cap: float | None = None,
    ) -> None:
        self.running = self.failed = 0
        self.reasons: Counter[str] = Counter()
        self.input_tokens = self.output_tokens = 0
        self.shown = Shown(
            command,
            total,
            "queries",
            enabled=enabled,
            already=already,
            every_s=every_s,
            extra=self.fields,
            show_cost=True,
            spent_before=spent_before,
            cap=cap,
            project=True,
        )

    def started(self) -> None:
        self.running += 1

    def stopped(self) -> None:
        self.running -= 1

    def finished(self, summary: dict[str, Any]) -> None:
        reason = summary.get("stop_reason") or "?"
        self.reasons[reason] += 1
        self.failed += reason == "api_error"
        usage = summary.get("usage") or {}
        self.input_tokens += usage.get("input_tokens", 0)
        self.output_tokens += usage.get("output_tokens", 0)
        # what this run paid: replies kept from an earlier run are already in the directory's spend before it
        self.shown.update(1, cost=(summary.get("cost_usd") or 0.0) - (summary.get("replayed_usd") or 0.0))

    def judged(self, cost: float) -> None:
        """A judging's dollars (a sweep judges each cell as it finishes): in the line's spend, not in its count."""
        self.shown.update(0, cost=cost)

    def fields(self) -> dict[str, Any]:
        """The run's own fields of the progress line; retries and 429s come with the summary (per worker)."""
        reasons = ",".join(f"{k}:{v}" for k, v in sorted(self.reasons.items())) or "-"
        return {
            "running": self.running,
            "failed": self.failed,
            "tokens_in": f"{self.input_tokens:,}",
            "tokens_out": f"{self.output_tokens:,}",
            "stop_reasons": reasons,
        }

    def close(self) -> None:
        self.shown.close()


def run_queries(
    plan: RunPlan, progress: Progress, nodes: dict[str, str] | None = None, cap: CostCap | None = None
) -> list[WorkerReport]:
    """Every pending query through the executor the config asks for; returns the workers' reports. On Ray,
    `nodes` gets the id of the node that ran each query.

    `workers: 0` runs `concurrency` trajectories at once in this process (debugging, small runs); otherwise
    `workers` Ray actors share them, with a watchdog at budget + grace_s (cancel, then kill after kill_grace_s)
    and a query lost after its worker died `max_attempts` times recorded as failed (agent/stage.py). Under a
    `cap` (--max-cost) every model call of every worker reserves from one budget; a refused call stops the stage
    (BudgetExceeded, raised once the running trajectories have ended).
    """
    cfg = plan.cfg
    options = MapOptions(
        max_in_flight=cfg.concurrency,
        per_worker=max(1, math.ceil(cfg.concurrency / max(cfg.workers, 1))),
        spare_calls=4,
        max_attempts=cfg.max_attempts,
        deadline_s=cfg.budget().wall_clock_s + cfg.grace_s,
        kill_grace_s=cfg.kill_grace_s,
        worker_cpus=cfg.worker_cpus,
        worker_memory=int(cfg.worker_memory_gb * 2**30),
        close_timeout_s=5,
    )
    outcomes = TrajectoryOutcomes(cfg, plan.config_hash, progress, cap)
    stage = Stage(
        worker=WorkerSpec(
            "rise_batch.agent.stage:QueryWorker", {"cfg": cfg, "config_hash": plan.config_hash}, "TrajectoryWorker"
        ),
        what="trajectory",
        describe=outcomes.describe,
        on_start=outcomes.on_start,
        on_stop=outcomes.on_stop,
        on_result=outcomes.on_result,
        on_node=lambda q, node: nodes.__setitem__(q.query_id, node) if nodes is not None else None,
        on_lost=outcomes.on_lost,
        on_event=outcomes.on_event,
        finished=outcomes.finished,
        services=outcomes.services,
        stop_on=(KeyRefused, BudgetExceeded),
        stuck_why=STUCK_WHY,
    )
    try:  # the key's variable is lent to the actors when attached to a cluster
        return executor_for(cfg.workers, options, cfg.ray_address, (cfg.llm.api_key_env,)).map(stage, plan.pending)
    finally:
        outcomes.close()


def verify_trajectories(
    plan: RunPlan, progress: Progress, nodes: dict[str, str], cap: CostCap | None = None
) -> list[WorkerReport]:
    """The driver's check of what the workers reported: one trajectory file per query, under this config hash, on
    its own view of the run directory. A query whose file it does not find runs once more (under the run's `cap`,
    as the first pass); still missing, the job fails naming the file and the node that wrote it. Returns the second
    pass's worker reports."""

    def missing() -> list[Query]:  # a retryable trajectory was written: the resume redoes it (RunIncomplete)
        return [q for q in plan.pending if not finished(plan.cfg.out, q.query_id, plan.config_hash, True)]

    gone = missing()
    if not gone:
        return []
    one = len(gone) == 1
    print(
        f"rise-batch run: {len(gone)} trajector{'y' if one else 'ies'} the workers reported written "
        f"{'is' if one else 'are'} not in {plan.cfg.out}/{TRAJECTORIES} (first: {gone[0].query_id}); running "
        f"{'it' if one else 'them'} again",
        file=sys.stderr,
        flush=True,
    )
    transport = run_queries(plan._replace(pending=gone), progress, nodes, cap)
    gone = missing()
    if gone:
        node = nodes.get(gone[0].query_id)
        if node is not None:
            node = node_labels().get(node, node)
        more = f" (and {len(gone) - 1} more)" if len(gone) > 1 else ""
        raise StorageError(
            f"{trajectory_path(plan.cfg.out, gone[0].query_id)}: missing{more}, "
            f"{f'written by node {node}' if node else 'written in this process'}, still after the query ran again: "
            f"the workers do not write the run directory this driver reads; {REMEDY}"
        )
    return transport


def run_cap(cfg: RunConfig) -> CostCap | None:
    """--max-cost over the run's total: what RUN_DIR's spend journal says was paid (money/spent.py: every call of
    every resume, those a kill left unsettled at their worst case), asked again whenever a stage starts, plus what
    the stage spends."""
    if cfg.max_cost_usd is None:
        return None
    return CostCap(cfg.max_cost_usd, lambda: spent_usd(cfg.out))


@holding("rise-batch run")
def run_trajectories(
    cfg: RunConfig, incomplete_ok: bool = False, cap: CostCap | None = None, pilot_only: bool = False
) -> dict[str, Any]:
    """The whole run; returns totals (also printed by the CLI and the job script). Trajectories a transient failure
    ended (`retryable`) make it raise RunIncomplete once the rest is done, unless `incomplete_ok` (a sweep, which
    marks the cell incomplete instead). `cap`: a limit shared with other stages (a sweep's), else the run's own
    --max-cost; reaching it raises CostLimitReached (exit 3) once what ran is recorded. `pilot_only` (--plan): run
    only a seeded sample of `cfg.pilot` queries (those finished count) and add the plan for the rest as "plan"."""
    require_cap_price(cfg.llm.model, cfg.llm.prices_file, cfg.max_cost_usd, cfg.llm.max_output_tokens)
    if pilot_only:
        require_plan_price(cfg.llm.model, cfg.llm.prices_file)
    cap = cap or run_cap(cfg)
    t0 = time.monotonic()
    plan = prepare_run(cfg)
    if pilot_only:
        plan = plan._replace(pending=pilot_sample(plan, cfg.pilot))
    progress = Progress(
        len(plan.queries),
        len(plan.queries) - len(plan.pending),
        cfg.progress,
        spent_before=spent_usd(location(cfg.out)) if cfg.progress else 0.0,  # judge's and earlier runs' included
        cap=cap.limit if cap is not None else None,
    )
    reports: list[WorkerReport] = []
    nodes: dict[str, str] = {}  # query id -> the Ray node that ran it
    stop: BudgetExceeded | None = None
    try:
        if plan.pending:
            reports = run_queries(plan, progress, nodes, cap)
            reports += verify_trajectories(plan, progress, nodes, cap)
    except BudgetExceeded as e:  # what ran is in its files; the driver's check is the resume's
        stop = e
    finally:
        progress.close()
    stats = RunStats.of_files(cfg.out, plan.queries, plan.config_hash)
    caches = [r.cache for r in reports]
    labels: dict[str, str] = {}
    if nodes or any(c.get("node") for c in caches):  # on Ray: how many queries each node ran
        labels = node_labels()
        stats.nodes = dict(sorted(Counter(labels.get(n, n) for n in nodes.values()).items()))
    if any(c.get("inputs") for c in caches):
        stats.cache = cache_by_node(caches, labels)
        stats.sources_checked_s = plan.sources_checked_s
        for node, c in stats.cache.items():
            print(cache_line(node, c), file=sys.stderr, flush=True)
    if reports:  # this invocation's HTTP traffic: attempts, retries, 429s, timeouts (per-worker sums)
        sent = add_counts(r.transport for r in reports)
        stats.transport = {k: v for k, v in sent.items() if k in TRANSPORT_KEYS}
    stats.system, stats.model, stats.config_hash = cfg.system, cfg.llm.model, plan.config_hash
    stats.ran, stats.skipped = len(plan.pending), len(plan.queries) - len(plan.pending)
    stats.wall_seconds = time.monotonic() - t0
    out = stats.to_json()
    out["spent_usd"] = round(spent_usd(cfg.out), 6)  # the journal: all the run directory has paid, every resume
    money_lines(cfg.out)
    if stop is not None:
        raise with_result(CostLimitReached(budget_line(out, cfg, cap.limit if cap is not None else stop.limit)), out)
    if pilot_only:
        out["plan"] = run_plan(cfg, plan, out)
        return out
    if stats.retryable and not incomplete_ok:
        left = RunIncomplete(
            f"{stats.retryable} of {stats.queries} trajectories ended on a transient failure (their worker's "
            "node lost, connection refused, 5xx after every attempt; see `error` in their files, marked retryable). "
            f"The others are kept. Re-run the same command to run those again. ({summary_line(out, cfg.out)})"
        )
        raise with_result(left, out)
    return out


def money_lines(out: str) -> None:
    """The run's one line about replies billed at the engine's own count, and its one line about trajectory files
    that record less than the journal (money/spent.py), on stderr."""
    audit = spend_audit(out)
    estimated = audit.journal.usage_estimated
    if estimated:
        print(
            f"rise-batch run: {estimated} of the run directory's {audit.journal.calls} model calls had a usage the "
            "server did not state or that was not believable (missing, not numbers, negative, under half the "
            "engine's own count): billed at the engine's own count (usage_estimated in the spend journal)",
            file=sys.stderr,
            flush=True,
        )
    problem = record_problems(audit)
    if problem:
        print(f"rise-batch run: warning: {problem}", file=sys.stderr, flush=True)


def budget_line(stats: dict[str, Any], cfg: RunConfig, limit: float) -> str:
    """The one line a run stopped at --max-cost ends with: what its files record as spent, what was cut, how to go
    on."""
    cut = stats["stop_reasons"].get("budget", 0)
    earlier = f", ${stats['earlier_cost_usd']:.4f} of it by earlier runs of trajectories cut and run again" * bool(
        stats["earlier_cost_usd"]
    )
    left = stats["missing"] + stats["retryable"]
    return (
        f"stopped at the cost limit: the run has spent ${stats['spent_usd']:.4f} of --max-cost ${limit:.4f} (what "
        f"its spend journal records{earlier}); {stats['trajectories'] - stats['retryable']} of "
        f"{stats['queries']} queries are done, {cut} trajectories were cut by the limit (stop reason budget, marked "
        f"retryable, their spend recorded) and {left} queries are left. Re-run the same command with a higher "
        f"--max-cost to continue: the cut trajectories run again, and what they spent so far is reported as "
        f"earlier_cost_usd. (out={redact(cfg.out)})"
    )


def summary_line(stats: dict[str, Any], out: str) -> str:
    """One grep-able line; `cost_usd>=X cancelled_calls=N` when calls were cut (their billed output is in no reply)."""
    reasons = ",".join(f"{k}:{v}" for k, v in stats["stop_reasons"].items())
    keys = ("queries", "ran", "skipped", "model_calls_mean", "input_tokens", "output_tokens")
    sent = stats.get("transport")  # only when this invocation sent requests: never a 0 that was not measured
    transport = f" retries={sent.get('retries', 0)} 429s={sent.get('rate_limited', 0)}" if sent else ""
    cost = f"cost_usd={stats['cost_usd']} spent_usd={stats['spent_usd']}"
    if stats.get("earlier_cost_usd"):  # cut runs of re-run trajectories: paid, and not in cost_usd
        cost += f" earlier_cost_usd={stats['earlier_cost_usd']}"
    if stats.get("cost_lower_bound"):
        cost = f"cost_usd>={stats['cost_usd']} cancelled_calls={stats.get('cancelled_calls', 0)}"
    return (
        f"run system={stats['system']} model={stats['model']} "
        + " ".join(f"{k}={stats[k]}" for k in keys)
        + f" {cost} stop_reasons={reasons or '-'}{transport} wall_seconds={stats['wall_seconds']} out={out}"
    )
