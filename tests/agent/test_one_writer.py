"""One writer per run directory, for real: `rise-batch run` processes against the fake server over HTTP.

A first run hangs in a model call (the scripted agent's `hang`), so it holds its directory while the others start:
a second `run`, and a `judge`, on the same directory exit 2 naming its pid, and once it is killed with SIGKILL a new
run takes the directory at once (the kernel released the lock) and finishes the work.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

from rise_batch.dirlock import LOCK_FILE
from tests.agent.helpers import read_trajectories, run_dir, title_query, world, write_queries
from tests.cli import cli, cli_argv, cli_env

MODEL = "gpt-5.4-mini"


def argv(out: Path, q: Path, base_url: str) -> list[str]:
    w = world()
    return [
        "run", "--queries", str(q), "--out", str(out), "--docs", str(w.docs), "--index", str(w.index),
        "--index-backend", "numpy", "--no-progress", "--base-url", base_url, "--model", MODEL, "--workers", "0",
    ]  # fmt: skip


def wait_for_holder(out: Path, proc: subprocess.Popen) -> dict:
    """The lock file's record once `proc` has written itself into it (it then holds the directory)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        text = (out / LOCK_FILE).read_text() if (out / LOCK_FILE).exists() else ""
        if f'"pid": {proc.pid}' in text:
            return json.loads(text)
        time.sleep(0.01)
    raise AssertionError(f"the first run never held {out} (exit {proc.poll()})")


def test_a_second_run_is_refused_naming_the_first_and_a_killed_holder_leaves_the_directory_usable(
    agent_world, fake_server
):
    out = run_dir("one-writer")
    (d1, t1), (d2, t2) = list(world().titles.items())[:2]
    q = write_queries(world().root / "one-writer.jsonl", [title_query(d1, t1, "[fake:hang]"), title_query(d2, t2)])
    first = subprocess.Popen(
        cli_argv(*argv(out, q, fake_server.base_url)), env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        holder = wait_for_holder(out, first)
        assert holder["command"] == "rise-batch run" and holder["host"]
        second = cli(*argv(out, q, fake_server.base_url), timeout=120)
        assert second.returncode == 2, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and f"pid {first.pid} on host {holder['host']}" in lines[0], second.stderr
        assert "rise-batch run" in lines[0] and "Wait for it to end" in lines[0]
        judged = cli("judge", out, "--model", MODEL, "--base-url", fake_server.base_url, timeout=120)
        assert judged.returncode == 2 and f"pid {first.pid}" in judged.stderr, judged.stderr
        calls = len(fake_server.log())
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert calls <= 2, "the refused commands sent no model call"  # the hanging one and the other query's first
    fake_server.release.set()  # scripted hangs end: the resumed run finishes
    third = cli(*argv(out, q, fake_server.base_url), timeout=300)
    assert third.returncode == 0, third.stderr
    assert set(read_trajectories(out)) == {d1, d2}
    assert (out / LOCK_FILE).read_text() == ""  # released: emptied, left in place
