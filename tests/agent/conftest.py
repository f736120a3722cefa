"""Fixtures of the agent tests: the shared docs + index world and a fake server whose hangs end at teardown."""

from __future__ import annotations

import threading

import pytest

from rise_batch.fake_llm import FakeLLMServer
from rise_batch.fake_llm.agent import AgentResponder
from rise_batch.fake_llm.chat import FallbackResponder
from tests.agent.helpers import World, world
from tests.real_parts import require_bwrap


@pytest.fixture(scope="session")
def agent_world() -> World:
    require_bwrap()
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
