"""Tier rules: which documents go to the LLM."""

from __future__ import annotations

import pytest

from rise_batch.config import ConfigError
from rise_batch.tier_rule import parse_tier
from rise_batch.types import Doc


def test_length_rule_and_docid_file(tmp_path) -> None:
    rule = parse_tier(" chars >= 100 ")
    assert rule.identity == "chars>=100"
    assert rule.wants_llm(Doc("a", "x" * 100)) and not rule.wants_llm(Doc("b", "x" * 99))
    f = tmp_path / "ids.txt"
    f.write_text("# top surfaced\nd1\n\n d2 \n")
    listed = parse_tier(str(f))
    assert listed.docids == {"d1", "d2"} and listed.wants_llm(Doc("d2", "")) and not listed.wants_llm(Doc("d3", "x"))
    f2 = tmp_path / "ids2.txt"
    f2.write_text("d2\nd1\n")
    assert parse_tier(str(f2)).identity == listed.identity  # order does not matter, content does


@pytest.mark.parametrize("spec", ["chars>100", "words>=5", "/no/such/file"])
def test_bad_rules_fail_fast(spec, tmp_path) -> None:
    with pytest.raises(ConfigError, match="chars>=N"):
        parse_tier(spec)
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="lists no docids"):
        parse_tier(str(empty))
