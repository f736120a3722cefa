"""The one way a test runs `rise-batch` as a user types it: `python -m rise_batch.cli ARGS` in a real subprocess.

The subprocess imports the package of this checkout (PYTHONPATH starts with it), wherever the checkout lives and
whichever copy of the package is installed, so a test never exercises another tree's code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def cli_argv(*args: str | Path) -> list[str]:
    """The argv of `rise-batch ARGS` (for a test that starts the process itself, e.g. to kill it)."""
    return [sys.executable, "-m", "rise_batch.cli", *map(str, args)]


def cli_env(env: Mapping[str, str] | None = None, drop: Iterable[str] = ()) -> dict[str, str]:
    """This process's environment, plus `env`, minus `drop`, with this checkout first on PYTHONPATH."""
    out = {k: v for k, v in os.environ.items() if k not in set(drop)} | dict(env or {})
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), out.get("PYTHONPATH", "")) if p)
    return out


def cli(
    *args: str | Path,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    drop_env: Iterable[str] = (),
    timeout: float = 600,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run `rise-batch ARGS`; its stdout and stderr captured as text. `check`: assert it exited 0, showing both."""
    done = subprocess.run(
        cli_argv(*args), cwd=cwd, env=cli_env(env, drop_env), capture_output=True, text=True, timeout=timeout
    )
    if check:
        assert done.returncode == 0, f"rise-batch {' '.join(map(str, args))}:\n{done.stdout}\n{done.stderr}"
    return done
