"""The project's own OpenAI-compatible test server: deterministic answers, realistic usage, injectable faults.

Tests, benchmarks and users' dry runs talk to it over real HTTP through the real `openai` client, so everything
between a document and its checkpoint row runs as in production except the model. Standard library only.
"""

from rise_batch.fake_llm.faults import FaultConfig
from rise_batch.fake_llm.server import FakeLLMServer

__all__ = ["FakeLLMServer", "FaultConfig"]
