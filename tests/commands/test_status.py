"""Watching the money: `rise-batch status DIR` on a finished sweep, one of its runs and the same sweep in object
storage, touching nothing; a capped sweep's progress line named `sweep`, with the judge's dollars, the cap and the
projected total, and on resume this run's work told from the work done before it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rise_batch.cli import main
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.money.spent import spent_usd
from rise_batch.storage import location
from tests.agent.conftest import agent_world  # noqa: F401 - the shared docs + index world
from tests.agent.helpers import run_dir
from tests.commands.test_sweep_command import queries_of, sweep_config
from tests.eval.test_sweep_report import CELLS, swept  # noqa: F401 - the finished 2 x 2 sweep


def status(*argv: str) -> subprocess.CompletedProcess[str]:
    """`rise-batch status ...` as a user types it."""
    cmd = [sys.executable, "-m", "rise_batch.cli", "status", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root with its size and modification time: what a read-only command must leave as it was."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def test_status_of_a_finished_sweep_and_of_one_of_its_runs_touches_nothing(swept: Path) -> None:  # noqa: F811
    before = tree(swept)
    done = status(str(swept))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    total = json.loads((swept / "sweep.json").read_text())["spent_usd"]
    assert len(lines) == 5 and all(line.startswith("  cell ") for line in lines[:4])
    assert lines[-1] == f"sweep cmd {swept}: 4/4 cells done, 16/16 queries done, 0 left; spent ${total:.4f}"
    cell = swept / "cells" / CELLS[0]
    one = status(str(cell), "--json")
    assert one.returncode == 0, one.stderr
    got = json.loads(one.stdout)
    assert (got["kind"], got["done"], got["total"], got["left"], got["cap_usd"]) == ("run", 4, 4, 0, None)
    assert got["spent_usd"] == pytest.approx(spent_usd(cell), abs=1e-6)
    assert tree(swept) == before  # read only: no lock, no file written or touched

    empty = status(str(swept / "cells"))  # a directory no job wrote: one line, exit 2
    assert empty.returncode == 2 and "holds no run.json, sweep.json or manifest.json" in empty.stderr


def test_status_of_a_sweep_in_object_storage(swept: Path, s3) -> None:  # noqa: F811
    root = location(s3.uri())
    for p in swept.rglob("*"):
        if p.is_file() and "workspaces" not in p.parts and "report" not in p.parts:
            (root / str(p.relative_to(swept))).write_bytes(p.read_bytes())
    done = status(str(root), "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert (got["kind"], got["done"], got["total"], got["cells_done"]) == ("sweep", 16, 16, 4)
    local = json.loads(status(str(swept), "--json").stdout)
    assert got["spent_usd"] == pytest.approx(local["spent_usd"], abs=1e-6)


def progress_lines(err: str, command: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(f"rise-batch {command}: ")]


def test_a_capped_sweep_progress_line_then_its_resume(agent_world, capsys) -> None:  # noqa: F811
    d = run_dir("sweep-progress")
    q = queries_of(agent_world, d / "q.jsonl", 4)
    out = d / "out"
    with FakeLLMServer() as server:
        cfg = sweep_config(d / "s.yaml", str(out), str(q), str(agent_world.docs), str(agent_world.index),
                           server.base_url)  # fmt: skip
        data = yaml.safe_load(cfg.read_text())
        data["sweep"]["systems"], data["sweep"]["run"]["progress"] = ["rise"], True
        cfg.write_text(yaml.safe_dump(data))
        argv = ["sweep", str(cfg), "--max-cost", "5", "--progress-every", "0.05"]
        assert main(argv) == 0
        err = capsys.readouterr().err
        lines = progress_lines(err, "sweep")
        assert lines and not progress_lines(err, "run"), err  # named for the command that runs
        state = json.loads((out / "sweep.json").read_text())
        last = lines[-1]
        assert last.startswith("rise-batch sweep: 4/4 queries (100%) ")  # nothing done before
        spent = state["spent_usd"]
        assert state["spent"]["judge_usd"] > 0 and f"${spent:.4f} of $5.00 cap, projected ${spent:.4f}" in last, last

        cell = out / "cells" / "rise__gpt-5.4-mini__k5__sample"
        for stem in sorted(p.stem for p in (cell / "trajectories").glob("*.json"))[:2]:
            (cell / "trajectories" / f"{stem}.json").unlink()
            (cell / "judgments" / f"{stem}.json").unlink()
        del state["cells"][cell.name]
        (out / "sweep.json").write_text(json.dumps(state))
        before = spent_usd(cell)
        assert main(argv) == 0
        last = progress_lines(capsys.readouterr().err, "sweep")[-1]
        now = json.loads((out / "sweep.json").read_text())["spent_usd"]
        assert last.startswith("rise-batch sweep: 4/4 queries (100%; 2 before this run) "), last
        this_run = re.search(r"\(\$([\d.]+) this run\)", last)
        assert this_run and float(this_run[1]) == pytest.approx(now - before, abs=2e-4), last
        assert f"${now:.4f} (" in last and "of $5.00 cap" in last

    shown = status(str(out))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[-1].endswith(
        f"1/1 cells done, 4/4 queries done, 0 left; spent ${now:.4f} of $5.00 cap"
    )
    shutil.rmtree(d, ignore_errors=True)


def test_status_of_a_structuring_output(agent_world) -> None:  # noqa: F811
    before = tree(agent_world.docs)
    done = status(str(agent_world.docs), "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    manifest = json.loads((agent_world.docs / "manifest.json").read_text())
    assert (got["kind"], got["unit"], got["total"], got["shards"]) == ("structure", "docs", manifest["n_docs"], 1)
    assert (got["done"], got["left"], got["shards_done"]) == (manifest["n_docs"], 0, 1)
    line = status(str(agent_world.docs)).stdout.strip()
    assert (
        line.startswith(f"structure {agent_world.docs}: 1/1 shards done, {manifest['n_docs']}/") and "spent $" in line
    )
    assert tree(agent_world.docs) == before
