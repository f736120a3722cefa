"""File names from ids: the query-id stems and sweep cell names keep the exact names existing run directories use."""

from __future__ import annotations

import hashlib
import re

import pytest

from rise_batch.corpus.docmap import sanitize
from rise_batch.names import portable, safe_stem

IDS = ["769", "q_1.a-b", "", ".", "..", "a/b", "../../etc", "é", "x" * 150, "_x_", "a b\tc", "über.json", "-"]


def _old_safe_name(query_id: str) -> str:
    """agent/runner.py's safe_name before it moved here, verbatim: run directories on disk are keyed by it."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "_", query_id).strip("._")[:100]
    if s == query_id and s:
        return s
    return f"{s or 'q'}-{hashlib.sha256(query_id.encode()).hexdigest()[:8]}"


@pytest.mark.parametrize("qid", IDS)
def test_safe_stem_is_the_old_trajectory_file_stem(qid: str) -> None:
    assert safe_stem(qid) == _old_safe_name(qid)
    assert "/" not in safe_stem(qid) and safe_stem(qid) not in ("", ".", "..")


def test_portable_replaces_runs_and_keeps_the_rest() -> None:
    assert portable("gpt-5.4/nano mini") == "gpt-5.4_nano_mini"
    assert portable("__a..b__") == "__a..b__"  # no stripping: sweep cell ids never had it
    assert portable("Zürich") == "Z_rich"


def test_docmap_sanitize_stays_distinct() -> None:
    """Relpaths keep Unicode and more punctuation, strip, and bound bytes: a different contract, on purpose."""
    assert sanitize("Zürich (city), A&B's") == "Zürich_(city),_A&B's"
    assert sanitize("Zürich") == "Zürich" != portable("Zürich")
    assert sanitize("..") == "_" and sanitize("x" * 200).encode() == b"x" * 150
