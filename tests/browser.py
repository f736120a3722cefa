"""A real headless Chromium for the tests and benchmarks of report.html (Debian's `chromium`, from .ci/system-deps).

Plain subprocesses: `--dump-dom` prints the DOM after the page's scripts ran (the trajectory data files a page
inserts before its load event delay that event, so an opened trajectory is in the dump), `--screenshot` writes a
PNG. A missing chromium is a failure, not a skip (tests/real_parts.py): CI installs it.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.real_parts import require

TIMEOUT_S = 180  # a hang, not a slow page, fails


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if found := shutil.which(name):
            return found
    require("chromium", "chromium is not installed (Debian package `chromium`, from .ci/system-deps)")
    raise AssertionError("unreachable: require() fails or skips")


def _run(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="rise-chromium-") as profile:
        cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions"]
        cmd += ["--disable-background-networking", f"--user-data-dir={profile}", *args, url]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=True)


def dump_dom(url: str) -> str:
    """The DOM of `url` (a file:// URL, maybe with a #fragment) once its load event fired."""
    return _run(url, "--dump-dom").stdout


def screenshot(url: str, png: Path, size: str = "1400,1000") -> Path:
    _run(url, f"--screenshot={png}", f"--window-size={size}", "--hide-scrollbars")
    return png
