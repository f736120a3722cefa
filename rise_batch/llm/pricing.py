"""Token prices, kept in a data file so a new model or a price change is an edit to YAML, not to code.

Costs are recorded per document in the checkpoint and summed into run reports, so they must be reproducible from the
token counts alone: `cost()` is a pure function of the table and the counts. An unknown model must not stop a
1M-document job, so it costs 0 and is warned about once (per table), loudly enough to notice in the log.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from rise_batch.config import read_yaml_file
from rise_batch.errors import ConfigError

log = logging.getLogger(__name__)

# OpenAI names pinned snapshots "<model>-YYYY-MM-DD"; they cost what the alias costs.
_SNAPSHOT_SUFFIX = re.compile(r"-\d{4}-\d{2}-\d{2}$")
_FIELDS = ("input", "cached_input", "output")


class Price(NamedTuple):
    """US dollars per 1M tokens."""

    input: float
    cached_input: float
    output: float


class PriceTable:
    """Model -> Price, plus the batch discount; `cost()` turns usage into dollars."""

    def __init__(self, prices: Mapping[str, Price], batch_discount: float = 0.5) -> None:
        if not 0 < batch_discount <= 1:
            raise ValueError(f"batch_discount must be in (0, 1], got {batch_discount!r}")
        self.prices = dict(prices)
        self.batch_discount = batch_discount
        self._warned: set[str] = set()

    @classmethod
    def load(cls, extra: Iterable[str | Path] = ()) -> PriceTable:
        """The packaged table, extended (and overridden per model) by each extra YAML file in order."""
        text = resources.files("rise_batch.data").joinpath("prices.yaml").read_text(encoding="utf-8")
        prices, discount = _parse(yaml.safe_load(text), "rise_batch/data/prices.yaml")
        for path in extra:
            more, more_discount = _parse(read_yaml_file(path, "price table"), str(path))
            prices.update(more)
            discount = more_discount if more_discount is not None else discount
        return cls(prices, 0.5 if discount is None else discount)

    def find(self, model: str) -> Price | None:
        """The model's price, dated snapshots falling back to their alias; None when unknown (no warning)."""
        return self.prices.get(model) or self.prices.get(_SNAPSHOT_SUFFIX.sub("", model))

    def price(self, model: str, requested: str | None = None) -> Price | None:
        """The price of the model a reply names, else of the model that was `requested`; None (warned once) when
        neither is known.

        Providers answer with names of their own (a dated snapshot, a deployment alias); pricing such a reply at $0
        would let a dollar limit that was checked against the requested model never stop the run.
        """
        found = self.find(model)
        if found is None and requested and requested != model:
            found = self.find(requested)
            if found is not None and model not in self._warned:
                self._warned.add(model)
                log.warning("no price known for the replying model %r: priced as the requested %r", model, requested)
        if found is None and model not in self._warned:
            self._warned.add(model)
            log.warning("no price known for model %r: its cost is recorded as 0 (add it to a prices file)", model)
        return found

    def require(self, model: str, why: str) -> Price:
        """The model's price, or a ConfigError saying how to give one: a limit in dollars (`why`) cannot hold over
        replies recorded as $0, so a run with one must not start on an unknown model."""
        found = self.find(model)
        if found is None:
            raise ConfigError(
                f"{why} needs the price of model {model!r}, which is not in the prices table (its replies would be "
                f"recorded as $0 and the limit would never stop the run). Give it in a YAML file, e.g. `models: "
                f"{{{model}: {{input: 0.20, cached_input: 0.02, output: 1.25}}}}` (US dollars per 1M tokens), and "
                "pass --prices-file FILE (config key llm.prices_file)"
            )
        return found

    def cost(
        self,
        model: str,
        input_tokens: int,
        cached_input_tokens: int,
        output_tokens: int,
        *,
        batch: bool = False,
        requested: str | None = None,
    ) -> float:
        """Dollars for one reply of `model` (as the reply names it; `requested`: the configured model, the price
        when the reply's name has none). `input_tokens` includes the cached ones, as the API reports them."""
        p = self.price(model, requested)
        if p is None:
            return 0.0
        cached = min(max(cached_input_tokens, 0), input_tokens)
        dollars = ((input_tokens - cached) * p.input + cached * p.cached_input + output_tokens * p.output) / 1e6
        return dollars * self.batch_discount if batch else dollars


def _parse(data: Any, where: str) -> tuple[dict[str, Price], float | None]:
    if not isinstance(data, dict) or not isinstance(data.get("models", {}), dict):
        raise ValueError(f"{where}: expected a mapping with a `models:` mapping of model -> prices")
    prices: dict[str, Price] = {}
    for model, row in (data.get("models") or {}).items():
        if not isinstance(row, dict) or set(row) != set(_FIELDS):
            raise ValueError(f"{where}: model {model!r} needs exactly the keys {', '.join(_FIELDS)}")
        values = [row[f] for f in _FIELDS]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in values):
            raise ValueError(f"{where}: prices of {model!r} must be non-negative numbers, got {row!r}")
        prices[str(model)] = Price(*(float(v) for v in values))
    discount = data.get("batch_discount")
    if discount is not None and not isinstance(discount, int | float):
        raise ValueError(f"{where}: batch_discount must be a number, got {discount!r}")
    return prices, None if discount is None else float(discount)
