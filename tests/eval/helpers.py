"""Hand-built run directories in the trajectory format of the helper brief (what `rise-batch run` writes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def trajectory(query_id: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "query_id": query_id,
        "query": f"question {query_id}?",
        "system": "rise",
        "model": "gpt-5.4-nano",
        "config_hash": "cfg",
        "final_text": "",
        "exact_answer": None,
        "confidence": None,
        "stop_reason": "answered",
        "model_calls": 1,
        "tool_calls": {},
        "usage": {"input_tokens": 1000, "cached_input_tokens": 0, "output_tokens": 100},
        "cost_usd": 0.0,
        "elapsed_s": 1.0,
        "workspace_docs": 0,
        "retrieved_docids": [],
        "surfaced_docids": [],
        "gold_doc_ids": [],
        "answer": None,
        "steps": [],
        "error": None,
    }
    if fields.get("exact_answer") and "final_text" not in fields:
        conf = fields.get("confidence")
        fields["final_text"] = f"Explanation: found it.\nExact Answer: {fields['exact_answer']}\nConfidence: {conf}%"
    return base | fields


def write_run(
    root: Path, trajectories: list[dict[str, Any]], judgments: dict[str, dict[str, Any]] | None = None, **meta: Any
) -> Path:
    """RUN_DIR with run.json, trajectories/<qid>.json and optional judgments/<qid>.json."""
    (root / "trajectories").mkdir(parents=True, exist_ok=True)
    first = trajectories[0] if trajectories else {}
    run = {
        "system": first.get("system", "rise"),
        "model": first.get("model", "gpt-5.4-nano"),
        "config": {},
        "config_hash": "cfg",
        "queries": None,
        "k": 1000,
        "created": "2026-01-01T00:00:00Z",
    } | meta
    (root / "run.json").write_text(json.dumps(run))
    for t in trajectories:
        (root / "trajectories" / f"{t['query_id']}.json").write_text(json.dumps(t))
    if judgments:
        (root / "judgments").mkdir(exist_ok=True)
        for qid, j in judgments.items():
            (root / "judgments" / f"{qid}.json").write_text(json.dumps({"query_id": qid} | j))
    return root


def judgment(correct: bool, method: str = "llm", **fields: Any) -> dict[str, Any]:
    base = {
        "correct": correct,
        "extracted_final_answer": None,
        "reasoning": "",
        "confidence": None,
        "judge_model": "gpt-5.4-mini",
        "method": method,
        "parse_error": None,
        "usage": {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0},
        "cost_usd": 0.0,
    }
    return base | fields


def known_run(root: Path) -> Path:
    """Five queries with hand-computed metrics (tests/eval/test_metrics.py spells the arithmetic out)."""
    t = [
        trajectory(
            "q1",
            exact_answer="Paris",
            answer="Paris",
            confidence=90,
            tool_calls={"search": 2, "bash": 3, "read": 1},
            model_calls=7,
            cost_usd=0.01,
            gold_doc_ids=["d1", "d2"],
            retrieved_docids=["d1", "d2", "d3"],
            surfaced_docids=["d1"],
            workspace_docs=3,
        ),
        trajectory(
            "q2",
            exact_answer="Lyon",
            answer="Marseille",
            confidence=60,
            tool_calls={"search": 1, "read": 2},
            model_calls=4,
            cost_usd=0.02,
            gold_doc_ids=["d4"],
            retrieved_docids=["d5"],
            workspace_docs=1,
        ),
        trajectory(
            "q3",
            stop_reason="max_calls",
            final_text="I am still searching",
            answer="Nice",
            tool_calls={"search": 5, "bash": 10},
            model_calls=100,
            cost_usd=0.05,
            gold_doc_ids=["d6"],
            retrieved_docids=["d6"],
            surfaced_docids=["d6"],
            workspace_docs=10,
        ),
        trajectory(
            "q4",
            exact_answer="in 1912",
            answer="1912",
            confidence=80,
            tool_calls={"search": 1, "read": 1},
            model_calls=5,
            cost_usd=0.005,
            gold_doc_ids=["d7"],
            retrieved_docids=["d7", "d8"],
            workspace_docs=2,
        ),
        trajectory("q5", stop_reason="wall_clock", answer="Brest", model_calls=2, cost_usd=0.0),
    ]
    j = {
        "q1": judgment(True, "exact", confidence=90),
        "q2": judgment(False, confidence=60, cost_usd=0.002),
        "q3": judgment(False, "empty"),
        "q4": judgment(True, confidence=80, cost_usd=0.001),
        "q5": judgment(False, "empty"),
    }
    return write_run(root, t, j)
