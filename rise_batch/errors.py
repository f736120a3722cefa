"""Exception types shared across layers, kept in a module that imports nothing from rise_batch.

They live here, below every layer, so that a pure module (e.g. `structure/tier.py`) can raise a configuration error
without importing `config.py`, which itself imports the pure core: the error type is the only thing both need.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration the job cannot run with; the message says which key and why."""
