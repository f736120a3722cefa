"""Relpaths read back from files (docmap.parquet, a workspace's manifest.jsonl) are checked before any join.

A crafted docmap once hardlinked a host file into a workspace and the search preview printed it. Each attack here
goes through the real entry point (DocStore, a reopened Workspace, the `rise-batch workspace search` subprocess over
a real BM25 index) and must be refused with one line naming the file, the row and the docid.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rise_batch.corpus.docmap import UnsafePathError
from rise_batch.space.docstore import DocStore
from rise_batch.space.manifest import MANIFEST
from rise_batch.space.workspace import Workspace
from tests.conftest import REPO, sample_rows, write_jsonl
from tests.space.conftest import make_docs

# What a hostile or broken docmap can hold; every one must be refused.
CRAFTED = {
    "traversal": "../../../../../../../../../../etc/passwd",
    "absolute": "/etc/passwd",
    "traversal-inside": "en.wikipedia.org/../../../../../../../../../../etc/passwd",
    "dot-component": "./en.wikipedia.org/x.txt",
    "double-slash": "en.wikipedia.org//x.txt",
    "trailing-slash": "en.wikipedia.org/",
    "nul": "en.wikipedia.org/x\x00.txt",
    "newline": "en.wikipedia.org/x\n.txt",
    "escape": "en.wikipedia.org/\x1b[2Jx.txt",
    "backslash": "..\\..\\etc\\passwd",
    "too-long": "d/" * 600 + "x.txt",
    "component-too-long": "d/" + "x" * 300 + ".txt",
    "empty": "",
    "not-nfkc": "en.wikipedia.org/\ufb01le.txt",  # the 'fi' ligature: a second spelling of "file.txt"
    "lone-surrogate": "en.wikipedia.org/\ud800.txt",
}


def craft_docmap(root: Path, docid: str, rel: str) -> None:
    """Rewrite root/docmap.parquet with `docid` mapped to `rel` (the other rows unchanged)."""
    path = root / "docmap.parquet"
    cols = pq.read_table(path).to_pydict()
    cols["relpath"][cols["docid"].index(docid)] = rel
    # pyarrow refuses to encode a lone surrogate: write its bytes as binary-compatible UTF-8 via surrogatepass
    if any("\ud800" in r for r in cols["relpath"]):
        raw = [r.encode("utf-8", "surrogatepass") for r in cols["relpath"]]
        table = pa.table({"docid": cols["docid"], "relpath": pa.array(raw, pa.binary()).cast(pa.string(), safe=False)})
    else:
        table = pa.table(cols)
    pq.write_table(table, path)


@pytest.mark.parametrize("kind", sorted(CRAFTED))
def test_docstore_refuses_a_docmap_with_an_unsafe_relpath(tmp_path, kind):
    root, relpaths = make_docs(tmp_path / "docs", n=5)
    victim = list(relpaths)[2]
    craft_docmap(root, victim, CRAFTED[kind])
    with pytest.raises(UnsafePathError) as e:
        DocStore(root)
    msg = str(e.value)
    assert str(root / "docmap.parquet") in msg and "row 2" in msg, msg
    assert repr(victim) in msg or kind == "lone-surrogate", msg  # that row cannot be decoded, its bytes are shown
    assert "unsafe path" in msg and "re-run" in msg and "\n" not in msg


def test_safe_docmaps_still_load(tmp_path):
    root, relpaths = make_docs(tmp_path / "docs", n=20)
    assert dict(DocStore(root).relpath) == relpaths


def test_workspace_refuses_a_manifest_with_an_unsafe_relpath(docs, tmp_path):
    root, relpaths = docs
    ws_dir = tmp_path / "ws"
    with Workspace(ws_dir, DocStore(root), keep=True) as ws:
        ws.add(list(relpaths)[:2])
    line = {"docid": "evil", "relpath": "../../../../../../etc/passwd", "call": 1, "seq": 2, "time": 0.0}
    with open(ws_dir / MANIFEST, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
    with pytest.raises(UnsafePathError, match=r"manifest\.jsonl: line 3: unsafe path '\.\./"):
        Workspace(ws_dir, DocStore(root))


def test_cli_search_over_a_crafted_docmap_is_refused_and_links_nothing(tmp_path):
    """The reported attack, end to end: before the fix the preview printed /etc/passwd and exit code was 0."""
    from rise_batch.index import build_index, load_index

    docs, relpaths = make_docs(tmp_path / "docs")
    write_jsonl(tmp_path / "corpus.jsonl", sample_rows(len(relpaths)))
    build_index(tmp_path / "corpus.jsonl", tmp_path / "index", workers=1)
    top = load_index(tmp_path / "index", backend="numpy").search(["autism"], 1)[0].docids[0]
    # as many ../ as it takes from WS/files/<host>/ to /, so the link target is the host file itself
    craft_docmap(docs, top, "../" * 40 + "etc/passwd")
    ws = tmp_path / "ws"
    cmd = [sys.executable, "-m", "rise_batch.cli", "workspace", "search", "--index", str(tmp_path / "index")]
    cmd += ["--docs", str(docs), "--workspace", str(ws), "-k", "3", "autism"]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "root:" not in res.stdout + res.stderr
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rise-batch workspace: error: "), res.stderr
    assert "docmap.parquet" in err[0] and repr(top) in err[0] and "unsafe path" in err[0]
    assert not ws.exists() or not any((ws / "files").rglob("*"))
