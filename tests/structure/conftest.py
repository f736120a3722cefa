"""The shipped sample corpus (100 real Wikipedia articles), read once per session through the real reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from rise_batch.corpus.readers import iter_docs
from rise_batch.types import Doc

SAMPLE = Path(__file__).resolve().parents[2] / "rise_batch" / "data" / "enwiki_sample.jsonl.gz"


@pytest.fixture(scope="session")
def sample_docs() -> list[Doc]:
    docs = list(iter_docs(SAMPLE))
    assert len(docs) == 100
    return docs
