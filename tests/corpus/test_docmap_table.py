"""The docs dir's docid <-> relpath map is a memory-mapped table: the same answers as the Parquet docmap, checked
relpaths, derived again when docmap.parquet changes, refused when altered."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rise_batch.corpus.docmap import UnsafePathError
from rise_batch.corpus.docmap_table import DOCMAP_TABLE, MappedDocmap
from rise_batch.space.docstore import DocStore, load_docmap
from rise_batch.space.workspace import Workspace
from tests.space.conftest import make_docs


@pytest.fixture
def docs(tmp_path):
    return make_docs(tmp_path / "docs")


def test_the_docstore_maps_its_docmap_and_answers_as_the_parquet_does(docs):
    root, relpaths = docs
    store = DocStore(root)
    assert isinstance(store.relpath, MappedDocmap) and (root / DOCMAP_TABLE).is_file()
    with open("/proc/self/maps") as f:
        assert any(line.rstrip().endswith(str(root / DOCMAP_TABLE)) for line in f)  # mapped, not read
    assert dict(store.relpath.items()) == relpaths == load_docmap(root) and list(store.relpath) == list(relpaths)
    assert list(store.relpath.values()) == list(relpaths.values()) and len(store) == len(relpaths)
    for docid, rel in relpaths.items():
        assert store.relpath[docid] == store.relpath.get(docid) == rel and docid in store.relpath
        assert store.docid(rel) == docid and store.path(docid) == root / "corpus" / rel
    assert store.relpath.get("no-such-docid") is None and "no-such-docid" not in store.relpath
    assert store.docid("no/such.txt") is None and store.path("no-such-docid") is None
    with pytest.raises(KeyError):
        store.relpath["no-such-docid"]


def test_a_workspace_over_the_mapped_docmap_links_the_same_files(docs, tmp_path):
    root, relpaths = docs
    ids = list(relpaths)[:5]
    ws = Workspace(tmp_path / "ws", DocStore(root))
    added = ws.add([*ids, "no-such-docid"])
    assert added.new == ids and added.missing == ["no-such-docid"]
    assert all((ws.files_dir / relpaths[d]).read_bytes() == (root / "corpus" / relpaths[d]).read_bytes() for d in ids)


def test_a_new_docmap_parquet_is_never_answered_from_the_old_table(docs):
    root, relpaths = docs
    DocStore(root)
    first = next(iter(relpaths))
    moved = {d: ("moved/" + r if d == first else r) for d, r in relpaths.items()}
    pq.write_table(pa.table({"docid": list(moved), "relpath": list(moved.values())}), root / "docmap.parquet")
    store = DocStore(root)
    assert store.relpath[first] == "moved/" + relpaths[first] and store.docid("moved/" + relpaths[first]) == first
    assert store.docid(relpaths[first]) is None


def test_an_unsafe_or_repeated_docmap_row_refuses_the_docs_dir(docs):
    root, relpaths = docs
    rows = dict(relpaths)
    rows[next(iter(rows))] = "../../etc/passwd"
    pq.write_table(pa.table({"docid": list(rows), "relpath": list(rows.values())}), root / "docmap.parquet")
    with pytest.raises(UnsafePathError, match=r"docmap.parquet: refusing this docs dir: row 0 .*unsafe path"):
        DocStore(root)
    ids, rels = list(relpaths), list(relpaths.values())
    pq.write_table(pa.table({"docid": ids, "relpath": [rels[0], *rels[:-1]]}), root / "docmap.parquet")
    with pytest.raises(UnsafePathError, match="listed twice"):
        DocStore(root)


def test_a_table_altered_after_it_was_derived_is_refused_where_a_relpath_is_read(docs, tmp_path):
    """A table whose bytes were changed (here: a relpath turned into `..`) while its source stayed the same is
    not trusted: the relpath is checked as it is handed out (or the table is derived again when its check on open
    sees the change)."""
    root, relpaths = docs
    DocStore(root)
    table = root / DOCMAP_TABLE
    first_rel = relpaths[next(iter(relpaths))]
    bad = b"../" + first_rel.encode()[3:]
    data = table.read_bytes()
    assert data.count(first_rel.encode()) >= 1
    table.write_bytes(data.replace(first_rel.encode(), bad, 1))
    store = DocStore(root)
    try:  # the check on open (a sample of each hash) may catch it first: then the table is derived again
        assert store.relpath[next(iter(relpaths))] == first_rel
    except UnsafePathError as e:
        assert "unsafe path" in str(e)
