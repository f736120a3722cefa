"""Logging, configured once per process by the entry point (`rise-batch`, `jobs/*.py`): one handler on stderr.

Without it every library brings its own: Ray installs a handler on its `ray` logger at import, our modules' warnings
went through Python's last-resort handler, and the two formats interleaved. `setup_logging` puts one handler on the
root logger at `--log-level`; `route_ray_logging` (called by executor.ray.init_ray) sends Ray's driver-side records
through it too. Ray's "Token authentication is enabled for this Ray cluster" is news about the private local Ray a
command starts on purpose, logged as a WARNING by every `ray.init`: it is demoted to DEBUG (shown with
`--log-level debug`), while every other Ray record, the "token authentication is disabled" security warning and
errors included, passes unchanged.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass

from rise_batch.options import Layout, Section, add_layout, option
from rise_batch.progress import DEFAULT_EVERY_S

LEVELS = ("debug", "info", "warning", "error")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
RAY_AUTH_NEWS = "Token authentication is enabled"
_HANDLER_NAME = "rise-batch"


@dataclass(frozen=True)
class OutputOptions:
    """How a command talks, not what it computes (never part of a run's hash): every command's --log-level and
    --progress-every. Their flags default to None, "not given", so a job script's own setting is not overridden."""

    log_level: str = option("warning", choices=LEVELS, help="log records shown on stderr")
    progress_every: float = option(
        DEFAULT_EVERY_S,
        metavar="SECONDS",
        help="off a terminal (ray job logs, redirected output), print a progress line this often",
    )


OUTPUT_OPTIONS = Layout(OutputOptions, (Section(None, ("log_level", "progress_every")),))


def add_output_flags(p: argparse.ArgumentParser) -> None:
    """--log-level and --progress-every (OutputOptions)."""
    add_layout(p, OUTPUT_OPTIONS)


def pop_output_flags(args: argparse.Namespace) -> tuple[str | None, float | None]:
    """Take the output flags off `args`, so what is left are the command's own settings."""
    level = getattr(args, "log_level", None)
    every = getattr(args, "progress_every", None)
    for key in ("log_level", "progress_every"):
        if hasattr(args, key):
            delattr(args, key)
    return level, every


class _DemoteRayAuthNews(logging.Filter):
    """Ray's token-auth notice becomes a DEBUG record (see the module docstring); everything else passes as is."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and str(record.msg).startswith(RAY_AUTH_NEWS):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


def setup_logging(level: str | None = None) -> None:
    """One stderr handler on the root logger at `level` (default warning); calling it again only changes the level."""
    root = logging.getLogger()
    value = getattr(logging, (level or OutputOptions.log_level).upper())
    handler = next((h for h in root.handlers if h.get_name() == _HANDLER_NAME), None)
    if handler is None:
        handler = logging.StreamHandler(sys.stderr)
        handler.set_name(_HANDLER_NAME)
        handler.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(handler)
    root.setLevel(value)
    handler.setLevel(value)  # records propagated from Ray's logger (which ray.init sets to INFO) are checked here
    route_ray_logging()


def route_ray_logging() -> None:
    """Ray's driver-side records through the root handler (when one is set up), with the auth notice demoted."""
    auth = logging.getLogger(RAY_AUTH_LOGGER)
    if not any(isinstance(f, _DemoteRayAuthNews) for f in auth.filters):
        auth.addFilter(_DemoteRayAuthNews())
    if any(h.get_name() == _HANDLER_NAME for h in logging.getLogger().handlers):
        ray_logger = logging.getLogger("ray")
        ray_logger.handlers.clear()
        ray_logger.propagate = True
