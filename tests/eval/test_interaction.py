"""Interaction-space metrics on trajectories written by hand, where the answer is known step by step."""

from __future__ import annotations

from typing import Any

from rise_batch.eval.interaction import FIELDS, interaction
from tests.eval.helpers import trajectory

GOLD, PATH = "g", "en.wikipedia.org/Gold_doc.txt"
OTHER = "en.wikipedia.org/Other.txt"


def step(tool: str, arguments: dict[str, Any], output: str, surfaced=(), added: int = 0) -> dict[str, Any]:
    """A step as agent/loop.py writes it (the whole output is stored: shorter than the cut)."""
    return {
        "tool": tool,
        "arguments": arguments,
        "output": output,
        "surfaced": list(surfaced),
        "added": added,
        "output_lines": output.count("\n") + 1,
    }


def numbered(first: int, last: int, total: int = 50) -> str:
    lines = [f"{i:>6}\tline {i} of the document" for i in range(first, last + 1)]
    return "\n".join(
        [*lines, f"[lines {first}-{last} of {total}; {total - last} more lines: continue with offset={last}]"]
    )


def traj(steps: list[dict[str, Any]], retrieved: list[str], **fields: Any) -> dict[str, Any]:
    return trajectory(
        "q",
        steps=steps,
        retrieved_docids=retrieved,
        gold_doc_ids=[GOLD],
        gold_paths={GOLD: PATH},
        workspace_docs=len(retrieved),
        **fields,
    )


def test_gold_linked_at_step_2_shown_at_step_3_read_at_step_4() -> None:
    steps = [
        step("bash", {"command": "ls | head"}, "(no output)\n[exit code: 0]"),
        step("search", {"queries": ["a"]}, "Searched 1 query\n  1. [3.10] x1.txt", surfaced=["x1"], added=2),
        step("search", {"queries": ["b"]}, "Searched 1 query\n  1. [2.00] x3.txt", surfaced=["x3"], added=3),
        step("bash", {"command": "rg -l -i 'term'"}, f"{PATH}\n[exit code: 0]", surfaced=[GOLD]),
        step("read", {"path": PATH, "offset": 0, "limit": 10}, numbered(1, 10), surfaced=[GOLD]),
    ]
    m = interaction(traj(steps, ["x1", "x2", GOLD, "x3", "x4"]), [GOLD])
    assert m == {
        "gold_in_workspace_step": 2,
        "gold_surfaced_step": 3,  # rg -l names the file: shown, not read
        "gold_read": True,
        "gold_lines_read": 10,
        "lines_read": 10,
        "toc_lines_read": 0,
        "search_calls": 2,
        "workspace_docs_final": 5,
        "gold_surfaced_steps": [3, 4],
        "gold_read_steps": [4],
        "workspace_growth": [[1, 2], [2, 5]],
    }
    assert tuple(m) == FIELDS  # the names report.html's viewer takes from a per-query row


def test_an_rg_hit_surfaces_the_gold_and_its_matching_lines_are_read() -> None:
    hits = f"{PATH}:6:- L27\u201332: Early life \u2014 born in Lyon\n{PATH}:28:born in Lyon in 1901\n{OTHER}:3:Lyon too"
    steps = [
        step("search", {"queries": ["lyon"]}, f"  1. [4.0] {OTHER}\n      Other | L5\u20139: x", ["o"], added=2),
        step(
            "bash",
            {"command": "rg -n -i -m 4 'lyon' 2>/dev/null | head -50"},
            hits + "\n[exit code: 0]",
            surfaced=[GOLD, "o"],
        ),
    ]
    m = interaction(traj(steps, ["o", GOLD]), [GOLD])
    assert (m["gold_in_workspace_step"], m["gold_surfaced_step"], m["gold_read_steps"]) == (0, 1, [1])
    assert (m["gold_lines_read"], m["lines_read"]) == (2, 3)  # two hits in the gold, one elsewhere
    assert m["toc_lines_read"] == 2  # the preview's TOC entry and the rg hit on the gold's TOC line


def test_sed_n_reads_the_gold_by_its_path() -> None:
    body = "\n".join(f"body line {i}" for i in range(20, 30))
    steps = [
        step("search", {"queries": ["x"]}, "  1. [1.0] other", surfaced=["o"], added=2),
        step("bash", {"command": "cd en.wikipedia.org && cat Gold_doc.txt"}, body + "\n[exit code: 0]"),
        step("bash", {"command": f"sed -n '20,29p' ./{PATH}"}, body + "\n[exit code: 0]"),
        step("bash", {"command": f"cat {PATH} | head -n 5"}, "\n".join(body.split("\n")[:5]) + "\n[exit code: 0]"),
    ]
    m = interaction(traj(steps, ["o", GOLD]), [GOLD])
    # the cat after a cd reads a path relative to somewhere unknown: no read, and its lines are not counted
    assert m["gold_read_steps"] == [2, 3] and m["gold_surfaced_step"] == 2
    assert (m["gold_lines_read"], m["lines_read"]) == (15, 15)


def test_gold_in_the_workspace_and_shown_but_never_read() -> None:
    steps = [
        step("search", {"queries": ["x"]}, f"  1. [1.0] {PATH}", surfaced=[GOLD], added=3),
        step("bash", {"command": f"wc -l {PATH}"}, f"50 {PATH}\n[exit code: 0]", surfaced=[GOLD]),
        step("bash", {"command": "rg -c -i term | head -5"}, f"{PATH}:4\n[exit code: 0]", surfaced=[GOLD]),
        step("read", {"path": OTHER, "offset": 0, "limit": 3}, numbered(1, 3), surfaced=["o"]),
    ]
    m = interaction(traj(steps, [GOLD, "o", "p"]), [GOLD])
    assert (m["gold_in_workspace_step"], m["gold_surfaced_step"]) == (0, 0)
    assert (m["gold_read"], m["gold_lines_read"], m["gold_read_steps"]) == (False, 0, [])
    assert (m["lines_read"], m["gold_surfaced_steps"]) == (3, [0, 1, 2])


def test_a_cut_output_counts_its_lines_from_the_recorded_line_count() -> None:
    """The stored output is the first characters only: a 400-line read lost its trailer, output_lines has it."""
    s = step("read", {"path": PATH, "offset": 0, "limit": 400}, numbered(1, 400).rsplit("\n", 1)[0][:2000], [GOLD])
    s["output_lines"] = 401
    m = interaction(traj([s], []), [GOLD])
    assert (m["gold_lines_read"], m["gold_in_workspace_step"]) == (400, None)


def test_no_gold_and_old_trajectories_leave_the_gold_fields_unknown() -> None:
    s = step("read", {"path": PATH}, numbered(1, 3), [GOLD])
    assert interaction(traj([s], [GOLD]), [])["gold_read"] is None
    old = {k: v for k, v in s.items() if k in ("tool", "arguments", "output")}  # written before per-step records
    m = interaction(traj([old], [GOLD]), [GOLD])
    assert m["gold_read"] is None and m["gold_surfaced_step"] is None and m["lines_read"] == 3
