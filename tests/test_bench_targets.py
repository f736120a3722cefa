"""bench/targets.py: every figure beside its target and ratio, and nothing claimed that was not measured.

Run as a user runs it (`python -m bench.targets` in a subprocess on a results directory), on results written by the
benchmarks' own helper (bench.common.Run), in the envelope they all share.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import Run
from tests.conftest import REPO


def targets(results: Path) -> dict[str, dict]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.targets", "--results", str(results), "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return {r["what"]: r for r in json.loads(out.stdout)}


def write(results: Path, name: str, figures: dict[str, Any]) -> None:
    """`figures` as benchmark NAME writes them: in the envelope, through the one helper."""
    Run(name.removesuffix(".json")).write(figures, results / name, quiet=True)


def test_missing_results_are_not_measured_never_met(tmp_path: Path) -> None:
    rows = targets(tmp_path)
    assert rows, "the table lists every target even with no results"
    assert {r["verdict"] for r in rows.values()} == {"not measured"}
    assert all(r["figure"] is None for r in rows.values())


def test_figures_ratios_and_verdicts_follow_the_json(tmp_path: Path) -> None:
    over = {"overhead_p50_ms": 6.0, "overhead_p99_ms": 30.0, "p50_ms": 9.0}
    write(tmp_path, "workspace.json", {"sandbox": {"loadavg_start": [0.5, 0.4, 0.3], "true": {"long_lived": over}}})
    share = {"share_of_wall": {"harness_model_call_overhead_plus_loop": 0.05}}
    write(tmp_path, "trajectories.json", {"overhead": {"concurrency_16": share}})
    startup = {"after/idle": {"extra_s": [3.0, 4.0, 9.0], "extra_median_s": 4.0, "load": [1.0, 2.0]}}
    write(tmp_path, "run_startup.json", {"summary": startup})
    rows = targets(tmp_path)
    p50 = rows["sandbox overhead over unsandboxed, `true`, long-lived, p50"]
    assert (p50["figure"], p50["ratio"], p50["verdict"]) == (6.0, "0.60", "met")
    p99 = rows["sandbox overhead over unsandboxed, `true`, long-lived, p99"]
    assert (p99["ratio"], p99["verdict"]) == ("2.00", "MISSED")
    share = rows["harness share of wall, concurrency 16, 1 s latency"]
    assert (share["figure"], share["verdict"]) == (5.0, "MISSED"), "the target is strictly below 5%"
    idle = rows["run --workers 2 extra wall over --workers 0 (6 queries), idle, median"]
    assert (idle["figure"], idle["verdict"], idle["load"]) == (4.0, "met", [1.0, 2.0])
    assert rows["run --workers 2 extra wall over --workers 0 (6 queries), busy, median"]["verdict"] == "not measured"
    assert p50["load"] == [0.5, 0.4, 0.3]
    assert share["load"][0] >= 0, "a row with no load path of its own has the envelope's load at the start"
    assert rows["bash call `true` in the long-lived sandbox, whole call p50"]["verdict"] == "met"
    assert rows["bash call `true` in the long-lived sandbox, whole call p99"]["verdict"] == "not measured"
    assert rows["sandbox overhead over unsandboxed, `rg`, long-lived, p50"]["verdict"] == "not measured"


def test_rows_read_todays_bench_shapes(tmp_path: Path) -> None:
    """The default transport's row is `direct`'s, the index peak is PSS, the loaded 1M probes have rows, the
    pipeline's stages sum their attempts, a ratio divides two figures: a renamed configuration must read "not
    measured", never an old figure."""
    steady = {"engine_cpu_ms_per_request": 1.9}
    row = {"docs": 3000, "server_requests": 3000, "docs_per_second": 310.0, "steady": steady}
    ray = {**row, "docs_per_second": 341.0, "config": "2 Ray workers, direct (default)"}
    write(tmp_path, "structure_throughput.json", {"compare": [{**row, "config": "in-process, direct (default)"}, ray]})
    build = {"wall_s": 20.0, "peak_rss_gb": 0.8, "peak_pss_gb": 0.5}
    write(tmp_path, "index_scale.json", {"corpora": {"wiki2015": {"ours_build": build}, "syn1m": {"ours_build": {}}}})
    write(tmp_path, "index_scale_1m.json", {"corpora": {"syn1m": {"ours_build": {"wall_s": 300.0}}}})
    probe = {"search_ms": {"p50_ms": 9.0, "p99_ms": 40.0}, "loadavg_1m": {"mean": 6.0}}
    write(tmp_path, "search_load.json", {"probe_loaded": probe})
    stages = {"index.1 (killed)": {"wall_s": 100.0, "peak_rss_gb": 3.0, "loadavg_1m": {"mean": 4.0}},
              "index.2 (resumed)": {"wall_s": 250.5, "peak_rss_gb": 3.5, "loadavg_1m": {"mean": 5.0}}}  # fmt: skip
    write(tmp_path, "pipeline_1m.json", {"stages": stages})
    rows = targets(tmp_path)
    assert rows["structuring 3k wiki2015, default transport, in process"]["verdict"] == "met"
    assert rows["structuring: 2 Ray workers / one process (default, direct)"]["figure"] == 1.1
    assert rows["structuring: 2 Ray workers / one process (SDK httpx)"]["verdict"] == "not measured"
    assert rows["engine CPU per document (default transport)"]["figure"] == 1.9
    assert rows["engine CPU per document (SDK httpx)"]["verdict"] == "not measured"
    assert rows["wiki2015 index build peak PSS (hold 0.56 GB)"]["figure"] == 0.5
    one_m = rows["1M (bench) index build (hold 435 s)"]
    assert (one_m["figure"], one_m["source"]) == (300.0, "index_scale_1m.json")
    assert rows["1M search 3x top-1000 p50 under the trajectory load (probe)"]["verdict"] == "met"
    assert rows["1M search 3x top-1000 p99 under the trajectory load (probe)"]["verdict"] == "MISSED"
    assert rows["1M search + hardlink union p50 under the trajectory load (probe)"]["verdict"] == "not measured"
    index = rows["1M index build in the pipeline (hold 435 s; kill + resume)"]
    assert (index["figure"], index["load"], index["verdict"]) == (350.5, [4.0, 5.0], "held")
    assert rows["1M index build peak RSS in the pipeline (hold 3.8 GB)"]["figure"] == 3.5
    assert rows["1M structuring in the pipeline (hold 684 s; kill + resume, 50k LLM)"]["verdict"] == "not measured"


def test_a_file_from_before_the_envelope_is_read_and_said(tmp_path: Path) -> None:
    """Results written before the envelope existed keep their figures (nothing measured is dropped), and the table's
    run names the file to re-run."""
    (tmp_path / "trajectories.json").write_text(
        json.dumps({"overhead": {"concurrency_16": {"share_of_wall": {"harness_model_call_overhead_plus_loop": 0.01}}}})
    )
    done = subprocess.run(
        [sys.executable, "-m", "bench.targets", "--results", str(tmp_path)], capture_output=True, text=True, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert "| harness share of wall, concurrency 16, 1 s latency | 1 % |" in done.stdout
    assert "trajectories.json: written before the results envelope" in done.stderr
    assert "not measured" in done.stdout


def test_a_bad_row_is_refused_by_name(tmp_path: Path) -> None:
    bad = tmp_path / "targets.yaml"
    bad.write_text("rows:\n  - {what: x, file: a.json, figure: [a], unit: s, op: '<=', target: 1, derive: nope}\n")
    done = subprocess.run(
        [sys.executable, "-m", "bench.targets", "--results", str(tmp_path), "--targets", str(bad)],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert done.returncode != 0
    assert "row 'x'" in done.stderr and "derive" in done.stderr
