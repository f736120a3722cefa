"""How an agent's context is kept small: a system's setting (agent/systems.py), applied by the loop (agent/loop.py).

Its own module so that the systems' registry, which the CLI reads to build its help, loads no loop or tool code."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ContextPolicy:
    """DCI's context management: cut each tool result, and clear old ones once tool output grows too large."""

    max_tool_chars: int = 0  # 0: keep tool results whole
    clear_after_chars: int = 0  # 0: never clear; else clear results older than `keep_turns` past this total
    keep_turns: int = 12


DCI_CONTEXT = ContextPolicy(max_tool_chars=20_000, clear_after_chars=240_000, keep_turns=12)
