"""`rise-batch cache list|prune` on a real cache, beside real processes that hold entries as a run's workers do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rise_batch.cache import MARKER

# A process that materializes KEY under ROOT (a 1,000-byte file, source LABEL), says so, then keeps using the entry
# until RELEASE exists: a run's worker, which holds the entry for as long as it lives.
HOLD = """
import sys, time
from pathlib import Path
from rise_batch.cache import materialize
root, key, label, release = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
def fill(tmp):
    (tmp / "data.bin").write_bytes(b"x" * 1000)
    return 1000
got = materialize(root, "index", key, fill, label=label)
print(got.path, flush=True)
while not release.exists():
    time.sleep(0.05)
"""


def hold(root: Path, key: str, release: Path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(root), key, f"s3://bucket/{key}", str(release)],
                         stdout=subprocess.PIPE, text=True, env=os.environ)  # fmt: skip
    assert p.stdout.readline().strip() == str(root / "index" / key)
    return p


def made(root: Path, key: str, tmp: Path) -> None:
    """An entry made by a process that has exited (a finished run)."""
    release = tmp / f"release-{key}"
    release.touch()
    p = hold(root, key, release)
    assert p.wait(timeout=120) == 0


def cache(*args: str) -> tuple[int, str, str]:
    r = subprocess.run([sys.executable, "-m", "rise_batch.cli", "cache", *args], capture_output=True, text=True,
                       env=os.environ, timeout=120)  # fmt: skip
    return r.returncode, r.stdout, r.stderr


def listed(root: Path) -> dict[str, dict]:
    code, out, err = cache("list", "--cache-dir", str(root), "--json")
    assert code == 0, err
    return {e["key"]: e for e in json.loads(out)["entries"]}


def test_list_shows_each_entry_and_prune_never_removes_one_in_use(tmp_path):
    root, release = tmp_path / "cache", tmp_path / "release"
    runner = hold(root, "inuse", release)
    try:
        made(root, "old", tmp_path)
        made(root, "recent", tmp_path)
        old = time.time() - 10 * 86400
        os.utime(root / "index" / "old" / MARKER, (old, old))  # last used 10 days ago
        (root / "index" / ".gone.staging-4242").mkdir()  # a killed copy's leftovers
        (root / "index" / ".gone.staging-4242" / "half.bin").write_bytes(b"y" * 10)
        entries = listed(root)
        assert set(entries) == {"inuse", "old", "recent", ".gone.staging-4242"}
        assert entries["inuse"]["in_use"] and entries["inuse"]["holders"] == [runner.pid]
        assert not entries["old"]["in_use"] and not entries["recent"]["in_use"]
        assert entries["old"]["source"] == "s3://bucket/old" and entries["old"]["bytes"] >= 1000
        assert not entries[".gone.staging-4242"]["finished"]
        code, out, _ = cache("list", "--cache-dir", str(root))
        assert code == 0 and f"in use (pid {runner.pid})" in out and "s3://bucket/recent" in out

        code, out, _ = cache("prune", "--cache-dir", str(root), "--older-than", "7d")
        assert code == 0 and "removed 2 entries" in out  # the old one and the leftovers; nothing recent
        assert set(listed(root)) == {"inuse", "recent"}
        os.utime(root / "index" / "inuse" / MARKER, (old, old))  # old, but in use: kept
        code, out, _ = cache("prune", "--cache-dir", str(root), "--unused", "--older-than", "7d")
        assert code == 0 and "removed 1 entries" in out and "1 in use kept" in out and "index/inuse" in out
        assert set(listed(root)) == {"inuse"}
        assert (root / "index" / "inuse" / "data.bin").read_bytes() == b"x" * 1000  # the run still reads it
    finally:
        release.touch()
        runner.wait(timeout=120)
    code, out, _ = cache("prune", "--cache-dir", str(root), "--unused", "--json")
    got = json.loads(out)
    assert code == 0 and [e["key"] for e in got["removed"]] == ["inuse"] and got["freed_bytes"] >= 1000
    assert listed(root) == {}


def test_prune_by_size_removes_the_least_recently_used_first(tmp_path):
    root = tmp_path / "cache"
    for i, key in enumerate(("a", "b", "c")):
        made(root, key, tmp_path)
        t = time.time() - 1000 + i * 100  # a used first, c last
        os.utime(root / "index" / key / MARKER, (t, t))
    size = listed(root)["a"]["bytes"]
    code, out, _ = cache("prune", "--cache-dir", str(root), "--max-size", str(2 * size), "--dry-run")
    assert code == 0 and "would remove index/a" in out and set(listed(root)) == {"a", "b", "c"}
    code, out, _ = cache("prune", "--cache-dir", str(root), "--max-size", str(size))
    assert code == 0 and "removed 2 entries" in out and set(listed(root)) == {"c"}
    code, _, err = cache("prune", "--cache-dir", str(root))
    assert code == 2 and "--older-than AGE, --max-size SIZE or --unused" in err
    code, _, err = cache("prune", "--cache-dir", str(root), "--max-size", "lots")
    assert code == 2 and "'lots' is not a size" in err
