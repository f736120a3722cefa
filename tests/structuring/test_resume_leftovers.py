"""A structure job killed while writing corpus/<relpath> files leaves no stray file there once it is resumed.

Found by the 1M pipeline benchmark (bench/pipeline_1m.py): `ray job stop` during structuring left a zero-byte
`corpus/synthetic.example/.Niobium_(part_32).txt.3639.tmp` (the atomic writer's temporary of a worker that was
killed between write and rename); the resumed run finished every document but kept it, so OUT/corpus held one
file that no docmap row names, in the tree the `dci` system explores. A resume now deletes such temporaries in
corpus/ as it already did in checkpoint/ and stats/. The leftover here is made by a real process SIGKILLed inside
the project's own atomic writer, and the job runs as the real command.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
import rise_batch.io as io
path = Path(sys.argv[1])
def die(fh):
    fh.write(b"half a document")
    fh.flush()
    os.kill(os.getpid(), signal.SIGKILL)  # between write and rename, as a stopped job's worker
io._write_via(path, die)  # the writer behind write_text_atomic, with a write that dies
"""


def structure(corpus: Path, out: Path) -> None:
    cmd = [sys.executable, "-m", "rise_batch.cli", "structure", "--corpus", str(corpus), "--out", str(out)]
    done = subprocess.run([*cmd, "--shard-docs", "30", "--no-progress"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def corpus_files(out: Path) -> set[str]:
    return {str(Path(root, f).relative_to(out / "corpus")) for root, _, files in os.walk(out / "corpus") for f in files}


def test_resume_removes_a_killed_writers_temporary_from_corpus(tmp_path, sample_path):
    out = tmp_path / "out"
    structure(sample_path, out)
    relpaths = set(pq.read_table(out / "docmap.parquet", columns=["relpath"])["relpath"].to_pylist())
    assert corpus_files(out) == relpaths

    victim = out / "corpus" / sorted(relpaths)[-1]
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(victim)], capture_output=True, timeout=60)
    assert killed.returncode == -9
    leftovers = corpus_files(out) - relpaths
    assert len(leftovers) == 1 and next(iter(leftovers)).endswith(".tmp")  # what the kill left

    (out / "stats" / "shard-000003.json").unlink()  # the job was stopped before this shard was marked done
    structure(sample_path, out)
    assert corpus_files(out) == relpaths  # every document's file, and nothing else
