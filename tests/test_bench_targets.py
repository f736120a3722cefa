"""bench/targets.py: every figure beside its target and ratio, and nothing claimed that was not measured.

Run as a user runs it (a subprocess on a results directory), on bench JSON in the shape the benchmarks write.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def targets(results: Path) -> dict[str, dict]:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "targets.py"), "--results", str(results), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {r["what"]: r for r in json.loads(out.stdout)}


def test_missing_results_are_not_measured_never_met(tmp_path: Path) -> None:
    rows = targets(tmp_path)
    assert rows, "the table lists every target even with no results"
    assert {r["verdict"] for r in rows.values()} == {"not measured"}
    assert all(r["figure"] is None for r in rows.values())


def test_figures_ratios_and_verdicts_follow_the_json(tmp_path: Path) -> None:
    over = {"overhead_p50_ms": 6.0, "overhead_p99_ms": 30.0, "p50_ms": 9.0}
    (tmp_path / "workspace.json").write_text(
        json.dumps({"machine": {"loadavg_start": [0.5, 0.4, 0.3]}, "sandbox": {"true": {"long_lived": over}}})
    )
    (tmp_path / "trajectories.json").write_text(
        json.dumps({"overhead": {"concurrency_16": {"share_of_wall": {"harness_model_call_overhead_plus_loop": 0.05}}}})
    )
    (tmp_path / "run_startup.json").write_text(json.dumps({"extra_wall_s": 4.0, "load_average": [0.1, 0.2]}))
    rows = targets(tmp_path)
    p50 = rows["sandbox overhead over unsandboxed, `true`, long-lived, p50"]
    assert (p50["figure"], p50["ratio"], p50["verdict"]) == (6.0, "0.60", "met")
    p99 = rows["sandbox overhead over unsandboxed, `true`, long-lived, p99"]
    assert (p99["ratio"], p99["verdict"]) == ("2.00", "MISSED")
    share = rows["harness share of wall, concurrency 16, 1 s latency"]
    assert (share["figure"], share["verdict"]) == (5.0, "MISSED"), "the target is strictly below 5%"
    assert rows["run --workers 2 extra wall over --workers 0 (6 queries)"]["verdict"] == "met"
    assert rows["bash call `true` in the long-lived sandbox, whole call p50"]["verdict"] == "met"
    assert rows["bash call `true` in the long-lived sandbox, whole call p99"]["verdict"] == "not measured"
    assert rows["sandbox overhead over unsandboxed, `rg`, long-lived, p50"]["verdict"] == "not measured"


def test_rows_read_todays_bench_shapes(tmp_path: Path) -> None:
    """The default transport's row is `direct`'s, the index peak is PSS when measured, the loaded 1M probes and the
    interleaved start-up medians have rows: a renamed configuration must read "not measured", never an old figure."""
    steady = {"engine_cpu_ms_per_request": 1.9}
    row = {"docs": 3000, "server_requests": 3000, "docs_per_second": 310.0, "steady": steady}
    (tmp_path / "structure_throughput.json").write_text(
        json.dumps({"compare": [{**row, "config": "in-process, direct (default)"}]})
    )
    build = {"wall_s": 20.0, "peak_rss_gb": 0.8, "peak_pss_gb": 0.5}
    (tmp_path / "index_scale.json").write_text(json.dumps({"corpora": {"wiki2015": {"ours_build": build}}}))
    probe = {"search_ms": {"p50_ms": 9.0, "p99_ms": 40.0}, "loadavg_1m": {"mean": 6.0}}
    (tmp_path / "search_load_1m.json").write_text(json.dumps({"probe_loaded": probe}))
    startup = {"after/idle": {"extra_s": [3.0, 4.0, 9.0], "extra_median_s": 4.0, "load": [1.0, 2.0]}}
    (tmp_path / "run_startup_compare.json").write_text(json.dumps({"summary": startup}))
    rows = targets(tmp_path)
    assert rows["structuring 3k wiki2015, default transport, in process"]["verdict"] == "met"
    assert rows["engine CPU per document (default transport)"]["figure"] == 1.9
    assert rows["engine CPU per document (SDK httpx)"]["verdict"] == "not measured"
    assert rows["wiki2015 index build peak PSS (hold 0.56 GB)"]["figure"] == 0.5
    assert rows["1M search 3x top-1000 p50 under the trajectory load (probe)"]["verdict"] == "met"
    assert rows["1M search 3x top-1000 p99 under the trajectory load (probe)"]["verdict"] == "MISSED"
    assert rows["1M search + hardlink union p50 under the trajectory load (probe)"]["verdict"] == "not measured"
    idle = rows["run --workers 2 extra wall over --workers 0 (6 queries), idle, median of 3"]
    assert (idle["figure"], idle["verdict"]) == (4.0, "met")
