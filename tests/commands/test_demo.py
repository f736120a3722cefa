"""`rise-batch demo` is the first thing a user runs: it must work end to end as an installed console script."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path


def test_demo_runs_end_to_end_and_resumes(tmp_path):
    exe = shutil.which("rise-batch") or f"{sys.executable} -m rise_batch.cli"
    out = tmp_path / "demo"
    cmd = [*exe.split(), "demo", "--out", str(out)]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    stats = json.loads((out / "stats.json").read_text())
    assert stats["docs_total"] == 100 and stats["docs_with_toc"] >= 95
    assert json.loads((out / "index" / "meta.json").read_text())["counts"]["n_docs"] == 100
    assert "structure docs_total=100" in first.stdout
    assert "en.wikipedia.org/Anarchism.txt" in first.stdout  # top hit of the sample search and the sample rg
    assert (out / "workspace").exists()
    # with bubblewrap here, the sample rg and the RISE agent ran sandboxed, and the dollars are labelled simulated
    assert "[exit code: 0]" in first.stdout and not re.search(r"^skipped|\(skipped", first.stdout + first.stderr, re.M)
    assert len(list((out / "runs" / "rise" / "trajectories").glob("*.json"))) == 3
    assert any(line.startswith("simulated") and "fake model" in line for line in first.stdout.splitlines())
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "stats.json").read_text())["resumed_done"] == stats["shards"]


def path_without(tmp_path: Path, *missing: str) -> str:
    """A PATH of one directory holding a symlink to every program on today's PATH except `missing`: the machine
    as a user without those programs has it (shutil.which and the shell both look only there)."""
    farm = tmp_path / f"path-without-{'-'.join(missing)}"
    farm.mkdir()
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            target = os.path.join(d, name)
            if name in missing or (farm / name).exists() or not os.access(target, os.X_OK):
                continue
            (farm / name).symlink_to(target)
    return str(farm)


def run_demo(out: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`rise-batch demo` as a separate process under `env`, from the output's parent; it must exit 0."""
    res = subprocess.run(
        [sys.executable, "-m", "rise_batch.cli", "demo", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=out.parent,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return res


# Imported first by every interpreter started with this PYTHONPATH: the test extras (and the optional fast/plots
# extras) then fail to import, as on a fresh `pip install -e .`.
NO_EXTRAS = """
import importlib.abc, sys
class _Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {%s}:
            raise ImportError(f"No module named {name!r} (made unimportable by the test)", name=name)
        return None
sys.meta_path.insert(0, _Missing())
"""
EXTRAS = ("numba", "matplotlib", "hypothesis", "pytest")


def test_demo_without_bubblewrap_or_extras_exits_0_and_runs_no_unsandboxed_shell(tmp_path):
    """A fresh laptop: no bwrap on PATH and only the package's own dependencies. Everything safe runs, the skip is
    one line naming the command that enables it, and no agent command runs outside a sandbox."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(NO_EXTRAS % ", ".join(map(repr, EXTRAS)))
    env = {**os.environ, "PATH": path_without(tmp_path, "bwrap"), "PYTHONPATH": str(shim)}
    probe = subprocess.run(
        [sys.executable, "-c", "import shutil, numba; print(shutil.which('bwrap'))"], env=env, capture_output=True
    )
    assert b"made unimportable by the test" in probe.stderr  # the shim works, so the run below really lacks them
    out = tmp_path / "demo"
    res = run_demo(out, env)
    both = res.stdout + res.stderr
    assert "structure docs_total=100" in res.stdout and "en.wikipedia.org/Anarchism.txt" in res.stdout
    skipped = [line for line in both.splitlines() if line.lower().startswith("skipped") or "(skipped" in line]
    assert len(skipped) == 1, skipped
    assert "bubblewrap" in skipped[0] and "apt-get install bubblewrap" in skipped[0]
    assert "UNSANDBOXED" not in both and "Traceback" not in both
    assert "simulated" in res.stdout  # the dollar figures come from the built-in fake model
    # the agent part ran with the system that needs no shell, and no trajectory holds a bash call
    run_dir = out / "runs" / "retrieval-agent"
    assert json.loads((run_dir / "run.json").read_text())["config"]["allow_unsandboxed"] is False
    trajectories = [json.loads(p.read_text()) for p in sorted((run_dir / "trajectories").glob("*.json"))]
    assert len(trajectories) == 3 and all(t["stop_reason"] == "answered" for t in trajectories)
    assert not any(s["tool"] == "bash" for t in trajectories for s in t["steps"])
    assert not (out / "runs" / "rise").exists()


def test_demo_uses_the_bwrap_on_path_and_skips_when_it_cannot_sandbox(tmp_path):
    """bwrap is the one found on PATH, for the check and for the run alike: a bwrap that cannot create namespaces
    (here a stand-in that fails as a locked-down kernel makes bwrap fail) turns the shell parts off with its reason,
    even though a working /usr/bin/bwrap exists on this machine."""
    farm = Path(path_without(tmp_path, "bwrap"))
    fake = tmp_path / "bwrap-stand-in"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    (farm / "bwrap").symlink_to(fake)
    out = tmp_path / "demo"
    res = run_demo(out, {**os.environ, "PATH": str(farm)})
    skipped = [line for line in res.stdout.splitlines() if line.startswith("skipped")]
    assert len(skipped) == 1 and "cannot create its sandbox" in skipped[0] and "Permission denied" in skipped[0]
    assert "UNSANDBOXED" not in res.stdout + res.stderr
    assert (out / "runs" / "retrieval-agent" / "trajectories").is_dir() and not (out / "runs" / "rise").exists()
