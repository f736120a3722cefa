"""money/usage.py: what a reply is billed for, given what its `usage` says and the engine's own count."""

from __future__ import annotations

import math

import pytest

from rise_batch.money.usage import Tokens, checked_usage, read_usage

ENGINE = (1000, 200)  # the engine's count of a request and of its reply


@pytest.mark.parametrize(
    "usage",
    [
        None,
        {},
        {"prompt_tokens": "1000", "completion_tokens": "200"},
        {"prompt_tokens": math.nan, "completion_tokens": 200},
        {"prompt_tokens": "x", "completion_tokens": "x"},
        {"prompt_tokens": 0, "completion_tokens": 0},
        {"prompt_tokens": 100, "completion_tokens": 20},
        {"prompt_tokens": -1000, "completion_tokens": -200},
        {"prompt_tokens": math.inf, "completion_tokens": 200},
        {"prompt_tokens": True, "completion_tokens": 200},
    ],
    ids=["missing", "empty", "strings", "nan", "x", "zeros", "tenth", "negative", "inf", "bool"],
)
def test_a_usage_that_is_not_believable_is_replaced_by_the_engine_count(usage) -> None:
    assert checked_usage(usage, *ENGINE) == (Tokens(1000, 0, 200), True)


def test_a_believable_usage_is_kept_but_never_below_an_exact_engine_count() -> None:
    told = {"prompt_tokens": 900, "completion_tokens": 260, "prompt_tokens_details": {"cached_tokens": 800}}
    assert checked_usage(told, *ENGINE) == (Tokens(1000, 800, 260), False)
    assert checked_usage(told, *ENGINE, floor=False) == (Tokens(900, 800, 260), False)  # a sampled count: judged only
    over = {"prompt_tokens": 10, "completion_tokens": 2}
    assert read_usage({**over, "prompt_tokens_details": {"cached_tokens": 50}}) == Tokens(10, 10, 2)  # cut to prompt
    assert read_usage({**over, "prompt_tokens_details": {"cached_tokens": "50"}}) == Tokens(10, 0, 2)  # dearer reading
