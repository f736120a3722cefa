"""The 2-node fixture itself: node B sees another directory under `local`, and a lost node B comes back."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def _listdir_on(cluster, resource: str) -> str:
    code = (
        "import os, ray\n"
        f"ray.init(address={cluster.address!r}, logging_level='error')\n"
        f"f = ray.remote(resources={{{resource!r}: 1}})(lambda: sorted(os.listdir({str(cluster.local)!r})))\n"
        "print('LS', ray.get(f.remote()))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=cluster.env, capture_output=True, text=True, timeout=300)
    return next(line for line in out.stdout.splitlines() if line.startswith("LS"))


def test_node_b_sees_another_local_disk_and_survives_a_restart(two_nodes) -> None:
    (two_nodes.local / "only-on-head").write_text("x")
    assert _listdir_on(two_nodes, "node_head") == "LS ['only-on-head']"
    assert _listdir_on(two_nodes, "node_b") == "LS []"
    assert two_nodes.kill_b(wait_dead=True) > 0
    assert two_nodes.alive_nodes() == ["node_head"]
    two_nodes.restart_b()
    assert sorted(two_nodes.alive_nodes()) == ["node_b", "node_head"]
    assert _listdir_on(two_nodes, "node_b") == "LS []"
