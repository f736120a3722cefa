"""`spent_usd(directory)`: all an output directory has paid, across resumes, in one function every reader shares.

The one figure summaries, `--json`, `stats.json`, `sweep.json`, reports and `rise-batch status` print as
`spent_usd`. (Today the sum of what a run directory's trajectory and judgment files record; the spend journal
replaces it as the source of truth.)
"""

from __future__ import annotations

from rise_batch.storage import AnyPath


def spent_usd(directory: AnyPath) -> float:
    """Dollars `directory` (a run, a sweep cell, a structuring OUT) has paid, every resume included."""
    from rise_batch.agent.ledger import recorded_spend  # lazy: placeholder until the journal lands
    from rise_batch.eval.judge_runner import recorded_judge_spend  # lazy: placeholder until the journal lands

    return recorded_spend(directory / "trajectories") + recorded_judge_spend([directory])
