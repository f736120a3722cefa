"""`--json` on every exit: a command stopped at `--max-cost` (exit 3) or with work left to a retry (exit 75) still
prints its JSON object on stdout, so a script that reads it gets the figures of every run, not only of those that
finished. The object is the one the driver attached to the exception (`errors.with_result`: the same keys as a
finished run's), else the command's `fallback` (what the output directory records), plus `exit_code` and `message`
(the line printed on stderr)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rise_batch.errors import CleanExit
from rise_batch.storage import redact_text


@contextmanager
def json_on_every_exit(
    want: bool, fallback: Callable[[], dict[str, Any]], extra: dict[str, Any] | None = None, indent: int | None = None
) -> Iterator[None]:
    """Print the JSON object of a command that ends by a CleanExit (when `want`), then let the exit happen."""
    try:
        yield
    except BaseException as e:  # CleanExit is a mixin: caught as what it is mixed into, then told apart
        if want and isinstance(e, CleanExit):
            found = e.result if e.result is not None else fallback()
            done = found | (extra or {}) | {"exit_code": e.exit_code, "message": redact_text(str(e))}
            print(json.dumps(done, indent=indent, sort_keys=True), flush=True)
        raise
