"""Every free recipe in jobs/ runs as its header says against a real `ray start --head`, outputs where promised.

Each `jobs/*_fake.yaml` header holds the `ray job submit` command a user types from the repository root. The test
takes that command from the header, word for word, and submits it to a real head (its own temp dir, ports and
token, shared by the module), with two substitutions a second user on this machine needs: the fake server's port
(a free one instead of 8765) and the directory submitted from (`$PWD` is a scratch directory holding what the user
would have: the repository's `rise_batch/` and `jobs/`, and `demo_out/` from `rise-batch demo`). The outputs must then
be in that directory, where the header says, and not in Ray's temporary copy of the working dir.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rise_batch.fake_llm import FakeLLMServer
from tests.jobs.test_ray_job_submit import RAY, ROOT, Head  # the `head` fixture (a real Ray head) is in conftest
from tests.real_parts import require

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _ray_cli() -> None:
    require("ray-cli", None if RAY else "the `ray` CLI is not installed (pip install 'ray[default]')")


FAKE_PORT = "127.0.0.1:8765"


def header_command(config: str) -> list[str]:
    """The `ray job submit ...` command of a config's header comment, continuation lines joined."""
    lines = []
    for line in (ROOT / "jobs" / config).read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    text = re.sub(r"\\\s*\n\s*", " ", "\n".join(lines))
    commands = [c for c in text.splitlines() if c.startswith("ray job submit")]
    assert len(commands) == 1, f"jobs/{config}: expected one `ray job submit` line in the header, got {commands}"
    return shlex.split(commands[0].split("#")[0])


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What a user's checkout holds when they follow the headers: the package, jobs/ and a `rise-batch demo`."""
    base = tmp_path_factory.mktemp("submitter")
    (base / "rise_batch").symlink_to(ROOT / "rise_batch")
    (base / "jobs").mkdir()
    for f in (ROOT / "jobs").iterdir():
        if f.suffix in (".jsonl", ".py"):
            (base / "jobs" / f.name).symlink_to(f)
    demo = [sys.executable, "-m", "rise_batch.cli", "demo", "--out", "demo_out"]
    done = subprocess.run(demo, cwd=base, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (base / "demo_out" / "index").is_dir()
    return base


@pytest.fixture(scope="module")
def server() -> FakeLLMServer:
    with FakeLLMServer() as s:
        yield s


def submit(head: Head, config: str, base: Path, server: FakeLLMServer) -> subprocess.CompletedProcess:
    """Submit the header's command from the repository root, as the user would from theirs."""
    text = (ROOT / "jobs" / config).read_text()
    assert text.count(FAKE_PORT) >= 1, f"jobs/{config} no longer points at the fake server on {FAKE_PORT}"
    (base / "jobs" / config).write_text(text.replace(FAKE_PORT, server.base_url.split("//")[1].split("/")[0]))
    argv = header_command(config)
    assert argv[:5] == ["ray", "job", "submit", "--working-dir", "."], argv
    argv = [RAY, *argv[1:3], "--address", head.dashboard, *argv[3:]]
    argv = [str(base) if a == "$PWD" else str(base / a) if a == f"jobs/{config}" else a for a in argv]
    env = {k: v for k, v in head.env.items() if k != "OPENAI_API_KEY"}
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def succeeded(done: subprocess.CompletedProcess) -> bool:
    return done.returncode == 0 and "succeeded" in done.stdout


def test_structure_demo_fake_writes_where_its_header_says(head: Head, user_dir: Path, server) -> None:
    done = submit(head, "structure_demo_fake.yaml", user_dir, server)
    assert succeeded(done), done.stdout[-4000:] + done.stderr[-2000:]
    out = user_dir / "runs" / "struct_demo_fake"
    stats = json.loads((out / "stats.json").read_text())
    assert stats["docs_total"] == 100 and stats["backend"] == "llm" and stats["llm_calls"] > 0
    assert len(list((out / "corpus").rglob("*.txt"))) == 100
    assert f"out={out}" in done.stdout  # the summary names the real place, not Ray's scratch copy


def test_run_rise_fake_reads_demo_out_and_writes_where_its_header_says(head: Head, user_dir: Path, server) -> None:
    done = submit(head, "run_rise_fake.yaml", user_dir, server)
    assert succeeded(done), done.stdout[-4000:] + done.stderr[-2000:]
    out = user_dir / "runs" / "rise_fake"
    queries = [json.loads(line) for line in (ROOT / "jobs" / "queries_demo.jsonl").read_text().splitlines() if line]
    trajectories = sorted((out / "trajectories").glob("*.json"))
    assert len(trajectories) == len(queries) > 0
    assert all(json.loads(t.read_text())["system"] == "rise" for t in trajectories)
    assert json.loads((out / "run.json").read_text())["config"]["docs"] == str(user_dir / "demo_out")


def test_sweep_demo_fake_writes_its_report_where_its_header_says(head: Head, user_dir: Path, server) -> None:
    done = submit(head, "sweep_demo_fake.yaml", user_dir, server)
    assert succeeded(done), done.stdout[-4000:] + done.stderr[-2000:]
    out = user_dir / "runs" / "sweep_demo_fake"
    assert (out / "report" / "report.md").is_file() and (out / "sweep.json").is_file()
    assert len([d for d in (out / "cells").iterdir() if (d / "run.json").is_file()]) == 4  # 2 systems x 2 K


def test_a_relative_out_without_base_is_refused_not_lost(head: Head, user_dir: Path, server) -> None:
    """Without --base, the job would write into Ray's scratch copy and report success: it must fail, saying why."""
    config = user_dir / "jobs" / "structure_demo_fake.yaml"
    config.write_text((ROOT / "jobs" / "structure_demo_fake.yaml").read_text())
    argv = [RAY, "job", "submit", "--address", head.dashboard, "--working-dir", "."]
    argv += ["--", "python", "jobs/structure_corpus.py", "--config", str(config)]
    done = subprocess.run(argv, cwd=ROOT, env=head.env, capture_output=True, text=True, timeout=600)
    assert not succeeded(done)
    assert "structure.out 'runs/struct_demo_fake' is relative" in done.stdout + done.stderr
    assert '--base "$PWD"' in done.stdout + done.stderr


def test_base_must_exist_on_the_node(tmp_path: Path) -> None:
    """Outside Ray too: a --base that is not a directory is one line and exit 2, before any work."""
    argv = [sys.executable, str(ROOT / "jobs" / "structure_corpus.py"), "--config"]
    argv += [str(ROOT / "jobs" / "structure_demo_fake.yaml"), "--base", str(tmp_path / "missing")]
    env = {k: v for k, v in os.environ.items() if k != "RAY_JOB_CONFIG_JSON_ENV_VAR"}
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("structure_corpus: error: --base ") and "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()
