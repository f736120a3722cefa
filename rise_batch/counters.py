"""Counters summed across workers: the transport reports of the structure and run stages, whose keys depend on the
transport (the HTTP client's counters, the Batch API's), so they stay dicts rather than one dataclass."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def add_counts(parts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Counters summed key by key (numbers, and the counters of a nested dict); other values are left out. For the
    workers' transport reports, whose keys depend on the transport (HTTP client, Batch API)."""
    total: dict[str, Any] = {}
    for p in parts:
        for k, v in p.items():
            if isinstance(v, dict):
                d = total.setdefault(k, {})
                for kk, vv in v.items():
                    d[kk] = d.get(kk, 0) + vv
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                total[k] = total.get(k, 0) + v
    return total
