"""A small materialized docs dir (DIR/corpus/<relpath> + docmap.parquet) from the demo corpus, one doc with a TOC."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from rise_batch.corpus.docmap import RelpathAssigner, frontmatter_title
from rise_batch.space.sandbox import SandboxLimits
from rise_batch.structure.anchors import body_start_line
from rise_batch.structure.render import render
from rise_batch.types import Section
from tests.conftest import sample_rows
from tests.real_parts import require_bwrap

# Short caps so that the time-limit tests finish in seconds; small /tmp and memory limits for the same reason.
# 8 s, not less: a sandboxed call runs in its own CPU cgroup weighted by its niceness, and at load ~20 even
# `cat /proc/self/mountinfo` took over 2 s to start and run, which cut answers the tests were reading.
TEST_LIMITS = SandboxLimits(
    timeout_s=8.0,
    max_output_chars=4000,
    max_procs=64,
    max_file_bytes=1 << 20,
    tmp_bytes=4 << 20,
    address_space_bytes=1 << 30,
    memory_bytes=256 << 20,
    tmp_inodes=1000,
)


def make_docs(root: Path, n: int = 20) -> tuple[Path, dict[str, str]]:
    """Write n demo docs as DIR/corpus/<relpath>; the first one structured (TOC + headings) as RISE renders it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    assigner = RelpathAssigner()
    relpaths: dict[str, str] = {}
    for i, row in enumerate(sample_rows(n)):
        text = row["text"]
        rel = assigner.assign(row["docid"], row.get("url"), frontmatter_title(text))
        if i == 0:
            start = body_start_line(text)
            text = render(text, [Section("Overview", "What the term means", start), Section("History", "", start + 3)])
        path = root / "corpus" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        relpaths[row["docid"]] = rel
    pq.write_table(pa.table({"docid": list(relpaths), "relpath": list(relpaths.values())}), root / "docmap.parquet")
    return root, relpaths


def corpus_fingerprint(docs: Path) -> dict[str, tuple[str, int, int]]:
    """sha256, mode and size of every corpus file: what no agent command may change."""
    out = {}
    for p in sorted((docs / "corpus").rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(docs))] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mode, st.st_size)
    return out


@pytest.fixture(scope="session")
def bwrap_ok() -> None:
    require_bwrap()


@pytest.fixture
def ws_root():
    """A world-traversable parent for workspaces, as the sandbox's unprivileged uid needs (pytest's tmp is 0700)."""
    d = tempfile.mkdtemp(prefix="rise-test-ws-")
    os.chmod(d, 0o755)
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def docs(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    return make_docs(tmp_path / "docs")
