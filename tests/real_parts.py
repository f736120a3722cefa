"""Real parts the tests need (bubblewrap, SeaweedFS, Chromium, the Ray CLI, a private mount namespace): missing is a
failure, not a skip.

CI installs every one of them (.ci/system-deps, the test extra), so a missing part means the environment is wrong,
and a silent skip would turn a real check into a green nothing. A developer without one asks for the skip by name:
`RISE_BATCH_TEST_SKIP=s3,chromium pytest` (or `all`); the session's summary then lists what was skipped that way.
"""

from __future__ import annotations

import os

import pytest

ENV = "RISE_BATCH_TEST_SKIP"
PARTS = ("bwrap", "s3", "chromium", "ray-cli", "two-nodes")
SKIPPED: dict[str, str] = {}  # part -> the first reason it was skipped for, for the terminal summary


def allowed_skips() -> set[str]:
    """The parts the environment variable asks to skip; an unknown name is an error, so a typo cannot skip."""
    asked = {p.strip() for p in os.environ.get(ENV, "").split(",") if p.strip()}
    unknown = asked - set(PARTS) - {"all"}
    if unknown:
        raise pytest.UsageError(f"{ENV}: unknown part(s) {sorted(unknown)}; known: {', '.join(PARTS)} or all")
    return set(PARTS) if "all" in asked else asked


def require(part: str, why: str | None) -> None:
    """Go on when `why` is None; otherwise fail naming the remedy, or skip when `part` is asked to be skipped."""
    assert part in PARTS, part
    if why is None:
        return
    if part in allowed_skips():
        SKIPPED.setdefault(part, why)
        pytest.skip(f"{part} skipped as asked by {ENV}: {why}")
    pytest.fail(
        f"{part} is needed and cannot run here: {why} (install it: bash .ci/system-deps && "
        f"pip install -e '.[test]'; or skip it on purpose with {ENV}={part})",
        pytrace=False,
    )


def require_bwrap() -> None:
    from rise_batch.space.sandbox import probe

    support = probe()
    require("bwrap", None if support.ok else f"bubblewrap cannot run here: {support.reason}")
