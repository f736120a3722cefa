"""The fake server as users start it: `rise-batch fake-llm` in a real subprocess, for tests of its command line."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cli_server(*flags: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`rise-batch fake-llm --port 0 FLAGS`: yields the process and its base URL (read from its first line); the
    process is killed on exit if the test did not end it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rise_batch.cli", "fake-llm", "--port", "0", *flags], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        base = re.search(r"(http://\S+/v1)", line)
        assert base, line
        yield proc, base[1]
    finally:
        proc.kill()


def cli_refusal(*flags: str) -> subprocess.CompletedProcess[str]:
    """`rise-batch fake-llm --port 0 FLAGS` for settings it must refuse at start (it exits instead of serving)."""
    cmd = [sys.executable, "-m", "rise_batch.cli", "fake-llm", "--port", "0", *flags]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)
