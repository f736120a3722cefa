"""What a path option takes, and the refusal of a storage URI where only a local path will do.

Every path option says it (`option(..., path=URI)` or `path=local("why")`, and `path_argument` for a command's own
arguments): `URI` takes a POSIX path or a storage URI, read and written through rise_batch/storage.py; `local(why)`
takes a path of this machine only (a tree that must be POSIX: hardlinks, a sandbox's bind mount, a lock). A URI
given to a local-only option is refused in one line naming it, and a `file://` URI is read as the path it names,
by `check_path_args` for the flags and positionals of every command and job script and by config.build_section for
the keys of every config file, so that no `s3://b/x` (or `file:///x`) is ever taken for a relative directory
`s3:/b/x`; a storage scheme without `//` (`s3:relative`) is refused as the malformed URI it is, never taken for a
local directory. The guides' option tables say which is which.

Pure stdlib (and storage, which is too).
"""

from __future__ import annotations

import argparse
import re
from typing import Any, NamedTuple

from rise_batch.storage import is_local_path, is_uri, location, redact


class PathKind(NamedTuple):
    """What a path option takes: `URI`, a local path or a storage URI (`s3://…`, any pyarrow/fsspec filesystem,
    read and written through rise_batch/storage.py); or `local(why)`, a path of this machine only (a tree that must
    be POSIX: hardlinks, a sandbox's bind mount, a lock), whose URI is refused in one line naming the option and
    `why`, so that no `s3://b/x` is ever taken for the relative directory `s3:/b/x`."""

    kind: str  # "uri" or "local"
    why: str = ""


URI = PathKind("uri")


class URIRefused(ValueError):
    """A storage URI where only a local path is taken: a user error (exit 2, rise_batch/errors.py), one line naming
    the option. (A ValueError rather than errors.ConfigError: errors.py's imports reach this module.)"""


# schemes of storage (pyarrow's and fsspec's usual ones): `s3:x` or `s3:/b/x`, without `//`, is a URI mistyped, not
# a local directory named `s3:x` (which a command would create and write into)
STORAGE_SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "hdfs", "viewfs", "oss", "hf", "file")
_SCHEME_NO_SLASHES = re.compile(rf"^({'|'.join(STORAGE_SCHEMES)}):(?!//)", re.IGNORECASE)


def local(why: str) -> PathKind:
    return PathKind("local", why)


def checked_path(name: str, value: Any, kind: PathKind | None) -> Any:
    """`value` of the path option `name` (a flag, a positional or a config key) as the code takes it: a `file://`
    URI as the plain path it names (code that takes a path would read `file:///x` as the relative `file:/x`), a
    list item by item; a storage URI where `kind` takes local paths only is URIRefused (exit 2) naming `name`."""
    if kind is None:
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(checked_path(name, v, kind) for v in value)
    if isinstance(value, str) and (m := _SCHEME_NO_SLASHES.match(value)):
        raise URIRefused(
            f"{name} {redact(value)}: a malformed URI ({m.group(1)}: without //); a URI names "
            f"{m.group(1)}://bucket/prefix, and a local path whose name starts so is written ./{redact(value)}"
        )
    if not isinstance(value, str) or not is_uri(value):
        return value
    if is_local_path(value):
        return str(location(value))
    if kind.kind == "local":
        raise URIRefused(f"{name} {redact(value)}: a local path only, not a storage URI ({kind.why})")
    return value


def path_argument(container: argparse._ActionsContainer, *names: str, path: PathKind | None, **kwargs: Any) -> Any:
    """`container.add_argument(*names, **kwargs)`, the action remembering what path it takes (`check_path_args`
    reads it): how a command's own path arguments (positionals, --config) declare their kind."""
    action = container.add_argument(*names, **kwargs)
    action.path_kind = path
    return action


def path_actions(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[argparse.Action]:
    """The actions of the parser `args` came from and of each subcommand on the way (`rise-batch workspace
    search`): the options this invocation offered."""
    found: list[argparse.Action] = []
    todo = [parser]
    while todo:
        p = todo.pop()
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(args, action.dest, None) or "")
                if chosen is not None:
                    todo.append(chosen)
            else:
                found.append(action)
    return found


def check_path_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """`checked_path` on every path argument of `args` (in place): a storage URI given where only a local path is
    taken is refused naming the flag or positional, a `file://` URI becomes its path. Every command and job script
    calls it once its arguments are parsed (rise_batch/cli.py, jobs/*.py)."""
    for action in path_actions(parser, args):
        kind = getattr(action, "path_kind", None)
        if kind is not None and hasattr(args, action.dest):
            setattr(args, action.dest, checked_path(shown_name(action), getattr(args, action.dest), kind))


def shown_name(action: argparse.Action) -> str:
    """How --help names the argument: its flag, else its metavar (`WS`) or upper-cased dest."""
    return action.option_strings[0] if action.option_strings else (action.metavar or action.dest.upper())
