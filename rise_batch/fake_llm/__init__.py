"""The project's own OpenAI-compatible test server: deterministic answers, realistic usage, injectable faults.

Tests, benchmarks and users' dry runs talk to it over real HTTP through the real `openai` client, so everything
between a document and its checkpoint row runs as in production except the model. Standard library only.
`from rise_batch.fake_llm import FakeLLMServer` resolves on first use, so the CLI's parser can read the settings'
fields (faults.py, serve_options.py) without importing the server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rise_batch.fake_llm.faults import FaultConfig
    from rise_batch.fake_llm.server import FakeLLMServer

_WHERE = {"FakeLLMServer": "server", "FaultConfig": "faults"}
__all__ = ["FakeLLMServer", "FaultConfig"]


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"rise_batch.fake_llm.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'rise_batch.fake_llm' has no attribute {name!r}")
