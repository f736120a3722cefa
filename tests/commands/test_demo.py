"""`rise-batch demo` is the first thing a user runs: it must work end to end as an installed console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys


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
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "stats.json").read_text())["resumed_done"] == stats["shards"]
