"""The spend journal against the fake server's own bill: a `kill -9` mid-run, servers whose `usage` lies, and a
trajectory file edited to record less than was paid. Real `rise-batch run` processes (a subprocess where it is
killed), the fake server over HTTP; the server bills the tokens it served whatever its replies say (`bill_usd`)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from rise_batch.cli import main
from rise_batch.money.journal import Spend
from rise_batch.money.spent import spent_usd
from tests.agent.helpers import run_dir, title_query, world, write_queries
from tests.agent.test_cost_cap import argv as cost_cap_argv
from tests.cli import cli, cli_argv, cli_env


def queries(name: str, n: int, marker: str = "") -> Path:
    items = list(world().titles.items())[:n]
    rows = [title_query(d, t, f"[fake:calls=5]{marker}") for d, t in items]
    return write_queries(world().root / f"{name}.jsonl", rows)


def argv(out: Path, q: Path, base_url: str, *more: str) -> list[str]:
    return cost_cap_argv(out, q, base_url, "--workers", "0", "--concurrency", "4", *more)


def bill(server) -> float:
    return server.stats()["bill_usd"]


def wait_for(cond, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Until `cond()` holds (the process must still be running: else its output is shown)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended first ({proc.returncode}): {proc.communicate()[1][-3000:]}")
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def served(server) -> int:
    return server.stats()["by_status"].get("200", 0)


def test_kill_9_mid_run_then_resume_pays_only_the_calls_in_flight_again_and_records_at_least_the_bill(
    agent_world, fake_server
):
    q = queries("killed", 4, "[fake:hang-at=3]")
    ref = run_dir("killed-ref")
    fake_server.release.set()  # the reference run: what the queries cost uncapped, nothing hanging
    assert main(argv(ref, q, fake_server.base_url)) == 0
    uncapped, calls = bill(fake_server), Spend.read(ref).calls
    fake_server.release.clear()
    cap = round(3 * uncapped, 6)  # room for the 4 calls in flight at the kill, counted at their worst case

    out = run_dir("killed")
    before, answered = bill(fake_server), served(fake_server)
    proc = subprocess.Popen(cli_argv(*argv(out, q, fake_server.base_url, "--max-cost", str(cap))), env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:  # three calls of each query answered (and paid), each one's fourth hanging: 4 in flight
        wait_for(lambda: served(fake_server) - answered == 12 and fake_server.stats()["in_flight"] == 4, proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    journal = Spend.read(out)
    assert (journal.calls, journal.unsettled) == (16, 4)
    assert not list((out / "trajectories").glob("*.json"))  # the files had nothing yet: the journal has it all
    fake_server.release.set()  # the provider finishes (and bills) the calls the killed process never saw answered
    deadline = time.monotonic() + 60
    while fake_server.stats()["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.05)
    killed_bill = bill(fake_server) - before
    assert spent_usd(out) >= killed_bill > 0  # the 4 in flight at their worst case

    done = cli(*argv(out, q, fake_server.base_url, "--max-cost", str(cap), "--json"))
    assert done.returncode == 0, done.stderr[-3000:]
    stats = json.loads(done.stdout.strip().splitlines()[-1])
    assert stats["transport"]["replayed"] == 12  # the calls paid before the kill: answered from their kept replies
    paid = bill(fake_server) - before
    assert paid <= uncapped + journal.unsettled_usd + 1e-9  # bought twice: at most the calls that were in flight
    assert Spend.read(out).calls == calls + 4
    assert stats["spent_usd"] == pytest.approx(spent_usd(out), abs=1e-6) and spent_usd(out) >= paid - 1e-9
    assert paid <= spent_usd(out) <= cap


@pytest.mark.parametrize("usage", ["missing", "string", "nan", "x", "zeros", "tenth", "negative"])
def test_a_server_whose_usage_lies_is_billed_at_the_engine_count_and_the_cap_holds(
    agent_world, fake_server, capsys, usage
):
    q = queries(f"usage-{usage}", 3)
    fake_server.configure(usage=usage)
    out, cap = run_dir(f"usage-{usage}"), 0.02  # under what the 3 queries cost: the cap must stop the run
    code = main(argv(out, q, fake_server.base_url, "--max-cost", str(cap)))
    err = capsys.readouterr().err
    assert code == 3, err
    paid = bill(fake_server)
    journal = Spend.read(out)
    assert 0 < paid <= spent_usd(out) <= cap  # the record never below the bill, the cap never passed
    assert journal.usage_estimated == journal.calls - journal.unsettled > 0
    assert sum("billed at the engine's own count" in line for line in err.splitlines()) == 1, err


def test_a_trajectory_file_recording_minus_100_is_named_once_and_never_lowers_what_was_spent(
    agent_world, fake_server, capsys
):
    q = queries("edited", 2)
    out = run_dir("edited")
    assert main(argv(out, q, fake_server.base_url)) == 0
    capsys.readouterr()
    spent = spent_usd(out)
    assert spent == pytest.approx(bill(fake_server))
    path = next((out / "trajectories").glob("*.json"))
    record = json.loads(path.read_text())
    path.write_text(json.dumps(record | {"cost_usd": -100}))

    assert main([*argv(out, q, fake_server.base_url, "--max-cost", str(spent * 1.01)), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.strip().splitlines()[-1])["spent_usd"] == pytest.approx(spent, abs=1e-6)
    warnings = [line for line in captured.err.splitlines() if "record less than the spend journal" in line]
    assert len(warnings) == 1 and path.name in warnings[0] and "cost_usd=-100" in warnings[0], captured.err
    assert spent_usd(out) == pytest.approx(spent) and bill(fake_server) == pytest.approx(spent)
