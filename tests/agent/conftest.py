"""Fixtures of the agent tests: the shared docs + index world and a fake server whose hangs end at teardown."""

from __future__ import annotations

import threading

import pytest

from rise_batch.fake_llm import FakeLLMServer
from rise_batch.fake_llm.agent import AgentResponder
from rise_batch.fake_llm.chat import FallbackResponder
from rise_batch.space.sandbox import probe
from tests.agent.helpers import World, world


@pytest.fixture(scope="session")
def agent_world() -> World:
    if not probe().ok:
        pytest.skip(f"bubblewrap cannot run here: {probe().reason}")
    return world()


@pytest.fixture
def fake_server():
    """An agent-only fake server; `server.release` ends scripted hangs so no handler thread outlives the test."""
    release = threading.Event()
    server = FakeLLMServer(responders=[AgentResponder(stop=release), FallbackResponder()])
    server.release = release
    with server:
        yield server
        release.set()
