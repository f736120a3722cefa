"""Finished shards of a dense build kept in `OUT/.dense-partial/`, so a killed build resumes without redoing them.

Embedding is the dear part of a dense build (GPU hours, or dollars at a paid `/embeddings` endpoint): a build that
dies at shard 900 of 1,000 must not embed, or pay for, the first 899 again. Each shard's vectors go to
`shard-N.npy` (written under a temporary name and renamed), then its summary to `shard-N.json` (docids, source rows,
content digests, bad rows, passage counts, what it cost), **last**: a shard with its summary is finished. `key.json`
says what the shards were made with (the embedder's identity, passage rule, bad-row policy, columns and the shard
plan); a build with another key starts over, so a resumed build never mixes vectors of two models or two plans.
The directory is removed once the index is published (`dense/` renamed into place).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rise_batch.io import write_json_atomic
from rise_batch.safe_read import SOURCE_MAX_BYTES, load_npy, read_json_file
from rise_batch.types import BadRow

if TYPE_CHECKING:
    import numpy as np

PARTIAL_DIR = ".dense-partial"


class ShardCheckpoint:
    """The finished shards of one build (`key`: what they were made with) under `out/.dense-partial/`."""

    def __init__(self, out: Path, key: dict[str, Any]) -> None:
        self.out, self.dir = out, out / PARTIAL_DIR
        key_file = self.dir / "key.json"
        if self.dir.is_dir() and (not key_file.is_file() or read_json_file(key_file, below=out) != key):
            shutil.rmtree(self.dir)  # another model, rule or plan: its shards are not this build's
        self.dir.mkdir(parents=True, exist_ok=True)
        if not key_file.is_file():
            write_json_atomic(key_file, key)

    def vectors_path(self, i: int) -> Path:
        return self.dir / f"shard-{i:06d}.npy"

    def summary_path(self, i: int) -> Path:
        return self.dir / f"shard-{i:06d}.json"

    def done(self, i: int) -> dict[str, Any] | None:
        """Shard `i`'s summary when it finished (its vectors whole), else None."""
        if not self.summary_path(i).is_file() or not self.vectors_path(i).is_file():
            return None
        summary = read_json_file(self.summary_path(i), below=self.out, max_bytes=SOURCE_MAX_BYTES)
        vecs = load_npy(self.vectors_path(i), below=self.out, ndim=2)
        return summary if len(vecs) == sum(summary["n_passages"]) else None

    def load(self, i: int) -> np.ndarray:
        return load_npy(self.vectors_path(i), below=self.out, ndim=2)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def save_shard(vectors_path: str, vecs: np.ndarray, summary: dict[str, Any]) -> None:
    """A shard's vectors, then its summary (the done marker), each written whole under its final name."""
    import numpy as np

    path = Path(vectors_path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        np.save(fh, vecs)
    tmp.replace(path)
    write_json_atomic(path.with_suffix(".json"), summary, indent=None)


def summary_json(docids: list[str], rows: list[int], digests: bytes, bad: list[BadRow], n_chars: int,
                 n_passages: list[int], cost_usd: float = 0.0) -> dict[str, Any]:  # fmt: skip
    """A DenseShard's fields as JSON (digests in hex), plus what embedding the shard cost."""
    return {
        "docids": docids,
        "source_rows": rows,
        "digests": digests.hex(),
        "bad_rows": [list(b) for b in bad],
        "n_chars": n_chars,
        "n_passages": n_passages,
        "cost_usd": cost_usd,
    }


def shard_key(identity: dict[str, Any], rule: str, on_bad_row: str, shards: list[Any]) -> dict[str, Any]:
    """What a build's shards depend on: the model (not where it is served), the passage rule, the policy, the plan."""
    model = {k: v for k, v in identity.items() if k not in ("base_url", "api_key_env")}
    plan = json.loads(json.dumps([list(s) for s in shards], default=str))
    return {"embedder": model, "passages": rule, "on_bad_row": on_bad_row, "shards": plan}


def recorded_cost(out: str | Path) -> float:
    """What the finished shards of an earlier, unfinished build at `out` paid (0 when there are none)."""
    base = Path(out)
    return sum(
        float(read_json_file(f, below=base, max_bytes=SOURCE_MAX_BYTES).get("cost_usd", 0.0))
        for f in sorted((base / PARTIAL_DIR).glob("shard-*.json"))
    )
