"""Where the relative paths of a `ray job submit` job land: against `--base DIR`, never in Ray's scratch copy.

`ray job submit --working-dir .` uploads the directory (without its git-ignored files, so not `demo_out/` or
`runs/`) and runs the job in a temporary copy of it that Ray deletes later. A config's relative `out:` would then be
written into that copy and lost while the job reports "succeeded", and a relative `docs: demo_out` would not be
found. So the jobs/ scripts take `--base DIR` (the recipes pass `--base "$PWD"`, which the submitting shell expands to
the directory you submit from) and make every path of the config absolute against it before any work starts; the
workers then get absolute paths too. DIR must exist on the node that runs the job: on one machine it is the
checkout, on a cluster it is shared storage.

Without `--base`, a submitted job refuses a relative output path (`out`, `workspace_root`) with the remedy, and
reads a relative input only if the uploaded copy holds it. Run outside a Ray job (`python jobs/...`), paths are
relative to the working directory, as on the command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from rise_batch.errors import ConfigError
from rise_batch.option_paths import local, path_argument
from rise_batch.storage import is_uri

OUTPUT_KEYS = frozenset({"out", "workspace_root"})
INPUT_KEYS = frozenset({"corpus", "queries", "qrels", "docs", "original_docs", "index", "prices_file", "tier"})
JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set by Ray's job supervisor for the entrypoint process
BASE_HELP = (
    'resolve the config\'s relative paths against DIR; recipes pass --base "$PWD" (the directory you submit from). '
    "Needed under `ray job submit --working-dir`, whose scratch copy of the working dir is deleted after the job"
)


def add_base_flag(p: argparse.ArgumentParser) -> None:
    path_argument(
        p,
        "--base",
        path=local("relative paths resolve against a directory of this node"),
        metavar="DIR",
        help=BASE_HELP,
    )


def in_uploaded_working_dir() -> bool:
    """True inside a job submitted with a working_dir: the current directory is Ray's temporary copy of it."""
    raw = os.environ.get(JOB_CONFIG_ENV)
    if not raw:
        return False
    try:
        runtime_env = (json.loads(raw) or {}).get("runtime_env") or {}
    except (ValueError, AttributeError):
        return False
    return bool(runtime_env.get("working_dir"))


def anchor_paths(cfg: Any, base: str | None, section: str) -> Any:
    """`cfg` (a config dataclass, with nested dataclasses, tuples and dicts) with every path made absolute.

    Relative paths resolve against `base`, or against the current directory where that is safe (see the module
    docstring); anything unsafe is a ConfigError naming the dotted key and the remedy."""
    uploaded = in_uploaded_working_dir()
    if base is not None:
        root = Path(base).expanduser()
        if not root.is_absolute() or not root.is_dir():
            raise ConfigError(
                f'--base {base}: not an existing absolute directory on this node (pass --base "$PWD" from the '
                "directory you submit from; on a cluster, a directory on storage every node sees)"
            )
    else:
        root = Path.cwd()

    def fix(key: str, value: str, where: str) -> str:
        if key == "tier" and ">=" in value:  # a rule such as chars>=2000, not a file
            return value
        if is_uri(value):  # s3://bucket/… (any storage URI) is absolute by nature
            return value
        path = Path(value).expanduser()
        if path.is_absolute():
            return str(path)
        if base is None and uploaded:
            remedy = (
                'add --base "$PWD" to the job\'s command (paths then resolve against the directory you submit from) '
                f"or make {where} absolute"
            )
            if key in OUTPUT_KEYS:
                raise ConfigError(
                    f"{where} {value!r} is relative: in a `ray job submit --working-dir` job it would be written into "
                    f"Ray's temporary copy of the working dir and lost; {remedy}"
                )
            if not (root / path).exists():
                raise ConfigError(
                    f"{where} {value!r} is not in the job's uploaded working dir (Ray does not upload git-ignored "
                    f"files such as demo_out/ or runs/); {remedy}"
                )
        return str(root / path)

    return _walk(cfg, section, fix)


def _walk(value: Any, where: str, fix: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            old = getattr(value, f.name)
            new = _field(f.name, old, f"{where}.{f.name}", fix)
            if new is not old:
                changes[f.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, dict):
        return {k: _field(k, v, f"{where}.{k}", fix) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_walk(v, f"{where}[{i}]", fix) for i, v in enumerate(value))
    return value


def _field(key: str, value: Any, where: str, fix: Any) -> Any:
    if isinstance(value, str) and value and key in OUTPUT_KEYS | INPUT_KEYS:
        return fix(key, value, where)
    return _walk(value, where, fix)
