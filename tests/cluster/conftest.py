"""The cluster tests' fixtures beyond `two_nodes`: the agent tests' shared docs + index world."""

from __future__ import annotations

from tests.agent.conftest import agent_world  # noqa: F401 - a fixture, used by name
