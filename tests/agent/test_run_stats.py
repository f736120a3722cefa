"""Per-node cache figures summed from the workers' reports (run_stats.cache_by_node)."""

from __future__ import annotations

from rise_batch.agent.run_stats import cache_by_node, cache_line


def report(node: str, docs_s: float, index_s: float, inputs_s: float | None, first: float) -> dict:
    inputs = {"docs": {"bytes": 100, "seconds": docs_s, "reused": False},
              "index": {"bytes": 50, "seconds": index_s, "reused": False}}  # fmt: skip
    out = {"node": node, "inputs": inputs, "first_trajectory_s": first}
    return out | ({"inputs_s": inputs_s} if inputs_s is not None else {})


def test_a_nodes_seconds_are_its_slowest_workers_wall_not_the_sum_of_overlapping_inputs() -> None:
    # the index is copied while the docs tree is made: 10 s and 8 s of inputs in 10.5 s of wall
    got = cache_by_node([report("n1", 10.0, 8.0, 10.5, 12.0), report("n1", 9.0, 8.5, 9.8, 11.0)], {"n1": "host-a"})
    node = got["host-a"]
    assert node["seconds"] == 10.5
    assert node["workers"] == 2 and node["first_trajectory_s"] == 11.0
    assert node["inputs"]["docs"]["seconds"] == 10.0 and node["inputs"]["index"]["seconds"] == 8.5
    assert node["bytes"] == 300 and "wall" not in node
    assert "in 10.5 s" in cache_line("host-a", node)


def test_reports_without_a_wall_fall_back_to_the_sum() -> None:
    # a worker of a release before inputs_s (or one that got its inputs one after the other)
    node = cache_by_node([report("n1", 10.0, 8.0, None, 12.0)], {})["n1"]
    assert node["seconds"] == 18.0
