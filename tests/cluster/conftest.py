"""Fixtures of the cluster tests beyond `two_nodes`: node-local disks left as each test found them, and the agent
tests' shared docs + index world."""

from __future__ import annotations

import shutil

import pytest

from tests.agent.conftest import agent_world  # noqa: F401 - a fixture, used by name


@pytest.fixture
def node_disks(two_nodes):
    """The 2-node cluster, with whatever a test puts on the node-local disks (`local` on the head, `b_disk` on node
    B) removed afterwards: the cluster is shared by the session's tests, which expect those disks as they were."""
    before = {d: set(d.iterdir()) for d in (two_nodes.local, two_nodes.b_disk)}
    yield two_nodes
    for d, kept in before.items():
        for p in set(d.iterdir()) - kept:
            shutil.rmtree(p) if p.is_dir() else p.unlink()


@pytest.fixture(autouse=True)
def _detached_afterwards():
    """A test that runs a command in this process against the 2-node cluster leaves this process attached to it;
    later tests' commands would then place their actors there (on node B, without their environment). Detach."""
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()
