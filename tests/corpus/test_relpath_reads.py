"""Paths read back from the project's own files are checked where they are joined: materialize's docmap slice and
the Batch API runner's batches.json. Real `rise-batch` subprocesses, real Parquet, the real fake server's client."""

from __future__ import annotations

import json
import shutil
from functools import partial
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rise_batch.corpus.docmap import RelpathAssigner, UnsafePathError, check_relpath, relpath_problem
from tests.cli import cli as shared_cli
from tests.conftest import REPO, SAMPLE

cli = partial(shared_cli, cwd=REPO)


def test_every_relpath_the_assigner_makes_passes_the_read_check():
    a = RelpathAssigner()
    for i, (title, url) in enumerate([("Zürich", "https://de.wikipedia.org/"), ("ﬁ ligature", None), ("..", "x")] * 3):
        rel = a.assign(str(i), url, title)
        assert check_relpath(rel, "test") == rel and relpath_problem(rel) is None


def test_materialize_refuses_a_crafted_docmap_and_writes_nothing_outside(tmp_path):
    out = tmp_path / "run" / "out"
    res = cli("structure", "--corpus", str(SAMPLE), "--out", str(out), "--backend", "heuristic", "--limit", "12")
    assert res.returncode == 0, res.stderr
    table = pq.read_table(out / "docmap.parquet").to_pydict()
    good = list(table["relpath"])
    victim = table["docid"][5]
    table["relpath"][5] = "../../escaped/owned.txt"
    import pyarrow as pa

    pq.write_table(pa.table(table), out / "docmap.parquet")
    shutil.rmtree(out / "corpus")
    res = cli("materialize", str(out))
    assert not (out.parent / "escaped").exists(), "materialize wrote outside the run"  # out/corpus/../../escaped
    assert res.returncode == 2, res.stdout + res.stderr
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rise-batch materialize: error: "), res.stderr
    assert "docmap.parquet" in err[0] and "row 5" in err[0] and repr(victim) in err[0] and "'..'" in err[0]
    # the remedy the message gives works: move the manifest aside, re-run the same command, materialize again
    (out / "manifest.json").rename(tmp_path / "manifest.json.bad")
    res = cli("structure", "--corpus", str(SAMPLE), "--out", str(out), "--backend", "heuristic", "--limit", "12")
    assert res.returncode == 0, res.stderr
    assert pq.read_table(out / "docmap.parquet").column("relpath").to_pylist() == good
    assert cli("materialize", str(out)).returncode == 0
    assert sorted(p.relative_to(out / "corpus").as_posix() for p in (out / "corpus").rglob("*.txt")) == sorted(good)


@pytest.mark.parametrize("field", ["group", "file"])
def test_batch_runner_refuses_a_crafted_batches_json(tmp_path, field):
    from rise_batch.llm.batch_runner import BatchRunner

    name = "../../../../tmp/owned"
    group, fname = ("pack-00000.r0", name) if field == "file" else (name, "pack-00000.r0.f0")
    manifest = {
        "version": 1,
        "endpoint": "/v1/chat/completions",
        "groups": {group: {"meta": {}, "created": "", "files": [{"name": fname, "n": 1, "status": "packed"}]}},
    }
    (tmp_path / "batches.json").write_text(json.dumps(manifest))
    with pytest.raises(UnsafePathError, match=r"batches\.json: group .*unsafe path '\.\./"):
        BatchRunner(object(), tmp_path)


def test_unsafe_path_error_is_a_user_error():
    from rise_batch.errors import EXIT_USAGE, exit_code_for

    with pytest.raises(UnsafePathError) as e:
        check_relpath("/abs", Path("f.json").name, "fix it")
    assert exit_code_for(e.value) == EXIT_USAGE and str(e.value) == "f.json: unsafe path '/abs' (absolute); fix it"
