"""The index's docids and vocabulary are memory-mapped tables, not Python objects; old indexes get them on load."""

from __future__ import annotations

import json
import shutil

import pytest

from rise_batch.index import build_index, load_index
from rise_batch.index.tables import DOCIDS_TABLE, VOCAB_TABLE, Vocabulary
from rise_batch.strtable import StrColumn, StrTable
from tests.index.conftest import generated_queries


@pytest.fixture(scope="module")
def built(generated_corpus, tmp_path_factory):
    corpus, rows = generated_corpus
    out = tmp_path_factory.mktemp("tables") / "index"
    build_index(corpus, out, workers=1)
    return out, rows


def _mapped_files(prefix: str) -> set[str]:
    with open("/proc/self/maps") as f:
        return {line.split()[-1] for line in f if line.rstrip().endswith(".strtab") and prefix in line}


def test_the_loaded_index_maps_its_docids_and_vocabulary_and_holds_no_dict_of_them(built):
    out, rows = built
    assert (out / DOCIDS_TABLE).is_file() and (out / VOCAB_TABLE).is_file()  # written by the build
    index = load_index(out, backend="numpy")
    assert isinstance(index.docids, StrColumn) and isinstance(index._vocab, Vocabulary)
    assert {str(out / DOCIDS_TABLE), str(out / VOCAB_TABLE)} <= _mapped_files(str(out))
    assert not hasattr(index, "_model")  # no bm25s model, whose vocab_dict and set of ids would be dicts and sets
    assert not [k for k, v in vars(index).items() if isinstance(v, (dict, set, list)) and len(v) > 10]
    assert list(index.docids) == json.loads((out / "docids.json").read_text()) == [r["docid"] for r in rows]
    vocab = json.loads((out / "vocab.index.json").read_text())
    assert len(index._vocab) == len(vocab) and all(index._vocab[t] == i for t, i in vocab.items())
    assert index._vocab.get("zzqxunknown") is None and "zzqxunknown" not in index._vocab


def test_an_index_without_tables_derives_them_on_load_and_searches_the_same(built, tmp_path):
    """An index directory built before the tables (or copied without them) still loads: the tables are derived
    from docids.json and vocab.index.json beside them, and every search answers as before."""
    out, rows = built
    queries = generated_queries(rows, 60)
    want = {b: load_index(out, backend=b).search(queries, 50) for b in ("numpy", "numba")}
    old = tmp_path / "old"
    shutil.copytree(out, old)
    for name in (DOCIDS_TABLE, VOCAB_TABLE):
        (old / name).unlink()
    for backend in ("numpy", "numba"):
        assert load_index(old, backend=backend).search(queries, 50) == want[backend]
    assert (old / DOCIDS_TABLE).is_file() and (old / VOCAB_TABLE).is_file()
    assert StrTable.open(old / DOCIDS_TABLE).header["source"]["file"] == "docids.json"


def test_a_table_older_than_its_json_is_never_used(built, tmp_path):
    """docids.json rewritten after the table was derived (here: the rows renamed, g00001 -> G00001, so the file
    keeps the size meta.json records): the loader derives the table again and reports the new docids, it does not
    answer from the stale table."""
    out, _ = built
    d = tmp_path / "idx"
    shutil.copytree(out, d)
    docids = json.loads((d / "docids.json").read_text())
    (d / "docids.json").write_text(json.dumps([x.upper() for x in docids]))
    index = load_index(d, backend="numpy")
    assert index.docids[0] == docids[0].upper() != docids[0] and len(index) == len(docids)
    assert index.search(["paris"], 3) == [
        h._replace(docids=[x.upper() for x in h.docids]) for h in load_index(out, backend="numpy").search(["paris"], 3)
    ]


def test_a_docids_json_of_another_size_than_recorded_is_refused(built, tmp_path):
    """docids.json rewritten to another size than meta.json records: refused before it is read, naming both."""
    out, _ = built
    d = tmp_path / "idx"
    shutil.copytree(out, d)
    docids = json.loads((d / "docids.json").read_text())
    (d / "docids.json").write_text(json.dumps([f"renamed-{x}" for x in docids]))
    with pytest.raises(ValueError, match=r"docids.json is [\d,]+ bytes where .*meta.json records [\d,]+"):
        load_index(d, backend="numpy")
