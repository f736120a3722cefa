"""Exception types shared across layers, and the one map from an error to an exit code; imports nothing from
rise_batch at import time.

They live here, below every layer, so that a pure module (e.g. `structure/tier.py`) can raise a configuration error
without importing `config.py`, which itself imports the pure core: the error type is the only thing both need.

`run_main` (which imports only `io`, `logs` and `progress` from rise_batch, lazily) is the only place that turns an
exception into a message and an exit code, for the `rise-batch` CLI and the `jobs/` scripts alike, so a command and
the job that runs the same function exit the same way:

- 2 (`EXIT_USAGE`): bad input the message explains (a config, a corpus row, a query file, an existing or missing
  path): any ValueError (ConfigError, CorpusError and QueryFileError are ValueErrors), FileNotFoundError,
  FileExistsError; printed as `<name>: error: <message>`;
- an exception that says how it ends (the `CleanExit` mixin: the cost limit's BudgetExceeded exits 3, a missing
  sandbox 2): printed as `<name>: <message>`, its message being a whole sentence;
- 75 (`EXIT_RETRY`, sysexits' EX_TEMPFAIL): a run that finished what it could but left work that failed for a
  transient reason (`RunIncomplete`: a connection refused, a lost node; `MemoryPressure`: Ray's memory monitor kept
  killing its workers); the same command retries exactly that work;
- object storage that cannot be reached (pyarrow's raw OSError): one line naming the URI and the endpoint, 75
  (`StorageUnreachable`: connection refused, timeout, 5xx) or 2 (`StorageError`: no such bucket, refused
  credentials, an endpoint that does not resolve), see `as_user_error`;
- 130 (`EXIT_INTERRUPTED`) on Ctrl-C: everything written so far is kept, so the advice is to re-run;
- anything else is a bug: it propagates with its traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

from rise_batch.io import remove_unused_outputs
from rise_batch.logs import setup_logging
from rise_batch.storage import redact_text  # a URI's credentials never reach a message
from rise_batch.storage_errors import storage_failure

EXIT_USAGE = 2
EXIT_BUDGET = 3
EXIT_RETRY = 75
EXIT_INTERRUPTED = 130
E = TypeVar("E", bound="CleanExit")
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, FileExistsError)


class ConfigError(ValueError):
    """A configuration the job cannot run with; the message says which key and why."""


class StorageError(ConfigError):
    """Storage a job cannot rely on: a path not every node of the cluster sees alike, or outputs a worker reported
    written that the driver does not find. The message names the path, the node and the remedy."""


class CleanExit:
    """Mixin for an exception that ends a command on purpose, with its own exit code and a message that is a whole
    sentence (printed after the command's name as it is). The mixin keeps this module free of the layers that raise
    them (structuring's BudgetExceeded, the sandbox's SandboxUnavailable)."""

    exit_code: int = EXIT_USAGE
    result: dict[str, Any] | None = None  # the command's figures when it stopped (what `--json` prints), if any


def with_result(exc: E, result: dict[str, Any]) -> E:
    """`exc` carrying `result`, the figures a command's `--json` prints when it ends by `exc` (exit 3, 75)."""
    exc.result = result
    return exc


class RunIncomplete(CleanExit, Exception):
    """Work that failed for a transient reason was left undone (never recorded as its outcome), so that the same
    command retries it; everything else the run finished is kept."""

    exit_code = EXIT_RETRY


class MemoryPressure(CleanExit, Exception):
    """Ray's memory monitor kept killing a stage's workers (the node ran out of memory, often for another process's
    sake): the work they held was redone until an item had been killed under it every time; the rest is kept, and
    the same command resumes once memory is free or fewer workers share a node."""

    exit_code = EXIT_RETRY


class StorageUnreachable(CleanExit, Exception):
    """Storage that could not be reached for a transient reason (a connection refused or timed out, a 5xx): the
    message names the URI and the endpoint; the same command resumes once it is back."""

    exit_code = EXIT_RETRY


def as_user_error(exc: BaseException) -> BaseException:
    """`exc`, or for an error of object storage (pyarrow's raw OSError, maybe raised in a Ray worker) the one-line
    error it stands for: StorageUnreachable (exit 75) or StorageError (bad configuration, exit 2)."""
    for e in (exc, getattr(exc, "cause", None), exc.__cause__):
        failure = storage_failure(e) if isinstance(e, OSError) and not isinstance(e, USER_ERRORS) else None
        if failure is not None:
            return StorageUnreachable(failure.message) if failure.transient else StorageError(failure.message)
    return exc


def exit_code_for(exc: BaseException) -> int | None:
    """The exit code an entry point returns for `exc`; None for a bug (let it propagate with its traceback)."""
    if isinstance(exc, CleanExit):
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, USER_ERRORS):
        return EXIT_USAGE
    return None


def run_main(
    fn: Callable[[], int | None],
    name: str,
    program: str | None = None,
    *,
    log_level: str | None = None,
    progress_every: float | None = None,
) -> int:
    """`fn()`'s exit code (None is 0), or the mapped code of what it raised, with one line on stderr. `name` starts
    error lines ("rise-batch index", "structure_corpus"), `program` the interruption line (default: `name`).
    A command that fails leaves no output directory it created and wrote nothing into (io.make_output_dir).
    Logging (`log_level`: one stderr handler) and the progress interval are set up here, once per process, for
    the CLI and the jobs alike (rise_batch.logs, rise_batch.progress)."""
    setup_logging(log_level)
    try:
        from rise_batch.progress import set_progress_every  # lazy: config (so the CLI's parser) loads this module

        set_progress_every(progress_every)
    except ValueError as e:
        print(f"{name}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    remove_unused_outputs()  # forget directories of an earlier command run in this process
    ok = False
    try:
        code = int(fn() or 0)
        ok = code == 0
        return code
    except BaseException as raised:
        e = as_user_error(raised)
        code = exit_code_for(e)
        if code is None:
            raise

        if isinstance(e, CleanExit):
            print(f"{name}: {redact_text(str(e))}", file=sys.stderr)
        elif isinstance(e, KeyboardInterrupt):
            print(f"{program or name}: interrupted; re-run the same command to resume", file=sys.stderr)
        else:
            print(f"{name}: error: {redact_text(str(e))}", file=sys.stderr)
        return code
    finally:
        if not ok:
            remove_unused_outputs()
