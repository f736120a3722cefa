"""A checkpoint is verified, not trusted: real damaged Parquet files, the real CLI, re-runs that redo what is gone.

Each test damages a finished run the way a disk, a user or a kill would (truncated part, deleted part, empty done
marker, one flipped byte), then checks what the next command does: `materialize` names the file and the command to
run (exit 2), `structure` moves the damaged file to OUT/damaged/, redoes exactly its documents, and ends with the
same checkpoint rows and the same documents as the undamaged run.
"""

from __future__ import annotations

import json

import pytest

from rise_batch.config import load_structure_config
from rise_batch.structuring.checkpoint import CheckpointStore
from rise_batch.structuring.job import run_structure
from tests.cli import cli
from tests.structuring.test_job import STATS_KEYS, checkpoint_table
from tests.structuring.test_kill_resume import outputs

DAMAGE_KEYS = {"damaged_files", "rebought_replies", "rebought_cost_usd"}


@pytest.fixture
def finished(tmp_path, sample_path):
    """A finished heuristic run: 100 documents in 2 shards of 50, one part each; and its outputs."""
    out = tmp_path / "out"
    cfg = load_structure_config(None, corpus=str(sample_path), out=str(out), shard_docs=50, progress=False)
    stats = run_structure(cfg)
    return cfg, out, outputs(out), stats


def test_done_marker_records_its_parts_and_undamaged_stats_are_unchanged(finished):
    from rise_batch.structuring.checkpoint import file_digest

    cfg, out, _, stats = finished
    store = CheckpointStore(out)
    for sid in (0, 1):
        marker = json.loads(store.stats_path(sid).read_text())
        [part] = store.parts(sid)
        assert marker["parts"] == [
            {
                "file": part.name,
                "rows": 50,
                "bytes": part.stat().st_size,
                "blake2b": file_digest(part),
                "llm_calls": 0,
                "cost_usd": 0.0,
            }
        ]
    written = json.loads((out / "stats.json").read_text())
    assert not DAMAGE_KEYS & set(written) and "parts" not in written and STATS_KEYS <= set(written)
    again = run_structure(cfg)  # a resume of an intact run: nothing moved, nothing re-bought
    assert not (out / "damaged").exists() and not DAMAGE_KEYS & set(again)


def test_truncated_part_of_a_finished_shard(finished):
    cfg, out, expected, _ = finished
    part = CheckpointStore(out).parts(1)[0]
    part.write_bytes(part.read_bytes()[:1000])
    done = cli("materialize", str(out))
    assert done.returncode == 2, done.stderr
    assert str(part) in done.stderr and "rise-batch structure" in done.stderr and "Traceback" not in done.stderr
    stats = run_structure(cfg)
    assert stats["docs_total"] == 100 and stats["damaged_files"] == [f"checkpoint/{part.name}"]
    assert stats["rebought_replies"] == 0  # heuristic: nothing paid
    assert (out / "damaged" / "checkpoint" / part.name).stat().st_size == 1000
    assert outputs(out) == expected
    assert json.loads((out / "stats.json").read_text())["damaged_files"] == [f"checkpoint/{part.name}"]
    again = cli("materialize", str(out))
    assert again.returncode == 0 and "docs=100 " in again.stdout, again.stderr


def test_deleted_part_is_redone_not_reported_as_done(finished):
    cfg, out, expected, _ = finished
    CheckpointStore(out).parts(1)[0].unlink()
    stats = run_structure(cfg)
    assert stats["docs_total"] == 100 and len(checkpoint_table(out)) == 100
    assert outputs(out) == expected


def test_empty_done_marker(finished):
    cfg, out, expected, _ = finished
    marker = CheckpointStore(out).stats_path(0)
    marker.write_text("")
    done = cli("materialize", str(out))
    assert done.returncode == 2 and str(marker) in done.stderr and "JSONDecodeError" not in done.stderr
    run = cli("structure", "--corpus", cfg.corpus, "--out", str(out), "--shard-docs", "50", "--no-progress")
    assert run.returncode == 0, run.stderr
    assert f"{marker}: damaged done marker" in run.stderr and "finished again" in run.stderr
    assert "docs_total=100 " in run.stdout and "rebought_replies=0 damaged_files=1 " in run.stdout
    assert outputs(out) == expected and json.loads(marker.read_text())["docs_total"] == 50


def test_truncated_part_of_an_unfinished_shard(finished):
    cfg, out, expected, _ = finished
    store = CheckpointStore(out)
    store.stats_path(1).unlink()  # the state a kill leaves: parts written, no marker yet
    part = store.parts(1)[0]
    part.write_bytes(part.read_bytes()[:-8])
    for _ in range(2):  # the first re-run repairs; the second finds nothing to do
        run = cli("structure", "--corpus", cfg.corpus, "--out", str(out), "--shard-docs", "50", "--no-progress")
        assert run.returncode == 0, run.stderr
    assert outputs(out) == expected


def test_verify_finds_a_flipped_byte_that_resume_does_not_read(finished):
    """Same size, intact footer: only the digest tells. Resume trusts it; --verify redoes the part."""
    cfg, out, expected, _ = finished
    part = CheckpointStore(out).parts(0)[0]
    data = bytearray(part.read_bytes())
    data[200] ^= 0xFF
    part.write_bytes(bytes(data))
    assert not DAMAGE_KEYS & set(run_structure(cfg))  # the cheap check reads metadata only
    run = cli("structure", "--corpus", cfg.corpus, "--out", str(out), "--shard-docs", "50", "--no-progress", "--verify")
    assert run.returncode == 0, run.stderr
    assert f"{part}: its digest differs from the done marker's" in run.stderr
    assert outputs(out) == expected
    assert (out / "damaged" / "checkpoint" / part.name).read_bytes() == bytes(data)


def test_marker_that_does_not_cover_its_shard(finished):
    """A marker written before parts were recorded (simulated by removing the records) is still checked: its shard's
    rows must add up to the shard's documents in docmap.parquet."""
    cfg, out, expected, _ = finished
    store = CheckpointStore(out)
    marker = json.loads(store.stats_path(1).read_text())
    del marker["parts"]
    store.stats_path(1).write_text(json.dumps(marker))
    store.parts(1)[0].unlink()
    stats = run_structure(cfg)
    assert stats["docs_total"] == 100 and "stats/shard-000001.json" in stats["damaged_files"]
    assert stats["rebought_unrecorded_files"] == 1  # an old marker does not say what its parts cost: not counted
    assert outputs(out) == expected


def test_original_text_twin_names_a_damaged_part(finished):
    """rise-bm25, the retrieval agent and dci read the checkpoint for original texts: same message, no traceback."""
    from rise_batch.agent.originals import original_docs
    from rise_batch.structuring.checkpoint import CheckpointError

    _, out, _, _ = finished
    part = CheckpointStore(out).parts(0)[0]
    part.write_bytes(part.read_bytes()[:500])
    with pytest.raises(CheckpointError, match=rf"{part}: damaged checkpoint part .*rise-batch structure"):
        original_docs(out, workers=1)
