"""Typed stats write what the dict stats wrote: stats.json of heuristic and LLM structure runs (online, resumed,
Batch API, documents left undone and their resume) and the stats of an agent run and its resume are compared, byte
for byte once times are masked, with the golden files tests/stats_scenarios.py made from the code before."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.real_parts import require_bwrap
from tests.stats_scenarios import SCENARIOS, run_scenario

GOLDEN = Path(__file__).parent / "golden" / "stats"


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_stats_are_written_as_before(scenario: str) -> None:
    if scenario == "trajectories":
        require_bwrap()
    for stem, text in run_scenario(scenario).items():
        assert text + "\n" == (GOLDEN / f"{stem}.json").read_text(encoding="utf-8"), f"{stem}.json differs"
