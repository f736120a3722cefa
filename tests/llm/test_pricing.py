"""The price table: packaged prices, user extensions, cached and batch pricing, unknown models."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rise_batch.llm.pricing import Price, PriceTable


def test_packaged_prices_match_the_design() -> None:
    table = PriceTable.load()
    assert table.prices["gpt-5.4-nano"] == Price(0.20, 0.02, 1.25)
    assert table.prices["gpt-5.4-mini"] == Price(0.75, 0.08, 4.50)
    assert table.prices["gpt-5.4"] == Price(2.50, 0.25, 15.00)
    assert table.prices["gpt-5.1"] == Price(1.25, 0.13, 10.00)
    assert table.batch_discount == 0.5


def test_cost_prices_cached_input_apart_and_batch_at_half() -> None:
    table = PriceTable.load()
    # 1M input of which 400k cached, 100k output on nano: 0.6*0.20 + 0.4*0.02 + 0.1*1.25
    online = table.cost("gpt-5.4-nano", 1_000_000, 400_000, 100_000)
    assert online == pytest.approx(0.12 + 0.008 + 0.125)
    assert table.cost("gpt-5.4-nano", 1_000_000, 400_000, 100_000, batch=True) == pytest.approx(online / 2)
    assert table.cost("gpt-5.4-2026-03-05", 0, 0, 1_000_000) == pytest.approx(15.0)  # dated snapshot


def test_unknown_model_costs_nothing_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    table = PriceTable.load()
    with caplog.at_level(logging.WARNING, logger="rise_batch.llm.pricing"):
        assert table.cost("mystery-model", 1000, 0, 1000) == 0.0
        assert table.cost("mystery-model", 1000, 0, 1000) == 0.0
    assert sum("mystery-model" in r.getMessage() for r in caplog.records) == 1


def test_user_file_extends_and_overrides(tmp_path: Path) -> None:
    extra = tmp_path / "prices.yaml"
    extra.write_text(
        "batch_discount: 0.4\nmodels:\n  my-model: {input: 1, cached_input: 0.1, output: 2}\n"
        "  gpt-5.4-nano: {input: 0.1, cached_input: 0.01, output: 1}\n"
    )
    table = PriceTable.load([extra])
    assert table.prices["my-model"] == Price(1.0, 0.1, 2.0)
    assert table.prices["gpt-5.4-nano"] == Price(0.1, 0.01, 1.0)
    assert table.prices["gpt-5.1"] == Price(1.25, 0.13, 10.00)
    assert table.batch_discount == 0.4


@pytest.mark.parametrize(
    "text",
    ["models: [1, 2]", "models:\n  m: {input: 1, output: 2}", "models:\n  m: {input: -1, cached_input: 0, output: 2}"],
)
def test_bad_price_files_are_refused_with_the_file_named(tmp_path: Path, text: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ValueError, match="bad.yaml"):
        PriceTable.load([bad])
