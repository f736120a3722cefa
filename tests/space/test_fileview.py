"""`read` streams: it shows exactly what reading the whole file showed before, with memory bounded by the lines
asked for, and NUL bytes rendered. A 1 GiB document (sparse, so cheap to make) read with limit 5 once cost 2.1 GB
of RSS and seconds; here a subprocess's peak RSS must stay within a small bound."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from rise_batch.space import fileview
from rise_batch.space.fileview import NUL_SHOWN, read_numbered
from tests.conftest import REPO

GIB = 1 << 30


def reference(data: bytes, offset: int, limit: int, max_chars: int) -> str:
    """`read` as it was before streaming (the whole file decoded and split), NULs rendered."""
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    total = len(lines)
    if total == 0:
        return "[empty file: 0 lines]"
    if offset >= total:
        return f"[offset {offset} is past the end: the file has {total} lines (valid offsets 0-{total - 1})]"
    end = min(total, offset + limit)
    out = []
    for i in range(offset, end):
        line = lines[i].rstrip("\r")
        if len(line) > max_chars:
            line = f"{line[:max_chars]} [... line cut: {len(line) - max_chars:,} more characters]"
        out.append(f"{i + 1:>6}\t{line.replace(chr(0), NUL_SHOWN)}")
    left = total - end
    if left:
        out.append(f"[lines {offset + 1}-{end} of {total}; {left:,} more lines: continue with offset={end}]")
    else:
        out.append(f"[lines {offset + 1}-{end} of {total}; end of file]")
    return "\n".join(out)


TEXT = st.text(st.sampled_from(["a", "b", " ", "\n", "\n", "\r", "\x00", "é", "€", "𝄞", "\ufeff"]), max_size=200)


@settings(max_examples=400, deadline=None)
@given(
    text=TEXT,
    offset=st.integers(0, 30),
    limit=st.integers(1, 30),
    max_chars=st.integers(1, 12),
    chunk=st.integers(1, 17),
)
def test_streamed_read_shows_what_the_whole_file_read_showed(tmp_path_factory, text, offset, limit, max_chars, chunk):
    data = text.encode()
    path = tmp_path_factory.getbasetemp() / "stream.txt"
    path.write_bytes(data)
    saved, fileview.READ_CHUNK = fileview.READ_CHUNK, chunk  # chunk edges everywhere: inside lines, characters
    try:
        got = read_numbered(path, offset, limit, max_chars)
    finally:
        fileview.READ_CHUNK = saved
    assert got == reference(data, offset, limit, max_chars)


def test_a_scan_budget_leaves_the_total_unknown_and_says_so(tmp_path):
    f = tmp_path / "long.txt"
    f.write_bytes(b"".join(b"line %d\n" % i for i in range(100_000)))
    out = read_numbered(f, 10, 3, ahead=1 << 20).split("\n")
    assert out[:3] == ["    11\tline 10", "    12\tline 11", "    13\tline 12"]
    size = f"{f.stat().st_size:,}"
    more = f"more lines follow (the file is {size} bytes, counted 1 MB past line 11)"
    assert out[3] == f"[lines 11-13; {more}: continue with offset=13]"
    f.write_bytes(b"head\n" + b"x" * (3 << 20) + b"\nlast\n")
    first, long, trailer = read_numbered(f, 0, 5, max_line_chars=10, ahead=1 << 20).split("\n")
    assert first == "     1\thead" and long.startswith("     2\txxxxxxxxxx [... line cut: at least ")
    assert trailer.startswith("[lines 1-2; line 2 goes on (the file is") and trailer.endswith("continue with offset=2]")


SPARSE_READ = """
import json, os, resource, sys
from rise_batch.space.safe_open import Below
from rise_batch.space.tools import read_in
root, rel, offset = sys.argv[1], sys.argv[2], int(sys.argv[3])
below = Below(root)
read_in(below, "small.txt", 0, 5, lambda r: None)  # every import and first-call cost paid before measuring
vm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + (512 << 20), vm + (512 << 20)))  # a read that grows fails fast
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
res = read_in(below, rel, offset, 5, lambda r: None)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"text": res.text, "error": res.error, "peak_growth_kb": after - before}))
"""


def test_read_of_a_1_gib_document_keeps_memory_bounded_and_renders_nuls(tmp_path):
    """Ten real lines (one with NULs), then a sparse gigabyte of NULs: one 1,073,741,7xx-character last line."""
    root = tmp_path / "files"
    root.mkdir()
    (root / "small.txt").write_text("warm-up\n")
    big = root / "big.txt"
    with open(big, "wb") as f:
        f.write(b"".join(b"line %d\n" % i for i in range(1, 10)) + b"a\x00b\x00c\n")
        f.truncate(GIB)
    code = "import sys; sys.path.insert(0, sys.argv[4])\n" + SPARSE_READ
    runs = {}
    for offset in (0, 8, 10):
        cmd = [sys.executable, "-c", code, str(root), "big.txt", str(offset), str(REPO)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ""})
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs[offset] = json.loads(proc.stdout)
    for r in runs.values():
        assert not r["error"] and "\x00" not in r["text"]
        assert r["peak_growth_kb"] < 100 * 1024, r["peak_growth_kb"]  # a few chunks and lines, not the file
    lines = runs[0]["text"].split("\n")
    assert lines[:5] == [f"{i:>6}\tline {i}" for i in range(1, 6)]
    assert lines[5].startswith("[lines 1-5; more lines follow (the file is 1,073,741,824 bytes")
    nul_line, giant = runs[8]["text"].split("\n")[1:3]
    assert nul_line == f"    10\ta{NUL_SHOWN}b{NUL_SHOWN}c"
    assert giant.startswith(f"    11\t{NUL_SHOWN * 2000} [... line cut: at least ")
    assert runs[10]["text"].split("\n")[0].startswith(f"    11\t{NUL_SHOWN * 2000} [... line cut: at least ")
    assert "continue with offset=11" in runs[10]["text"]
