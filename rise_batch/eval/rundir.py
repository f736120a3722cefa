"""Reading a run directory (run.json, trajectories/, judgments/) and writing judgments into it.

A run directory is the hand-off between the trajectory engine, the judge and the report (formats in the helper
brief and DESIGN.md), so everything here reads files and nothing else: a report can be rebuilt from a copied run
directory on a laptop. Judgments are keyed by the trajectory's file stem (already a safe name chosen by the
engine), so the two always pair up whatever the query ids look like.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from rise_batch.io import read_json
from rise_batch.storage import AnyPath, location


class RunData(NamedTuple):
    path: AnyPath  # a POSIX path or a run directory in object storage
    meta: dict[str, Any]  # run.json ({} when absent)
    trajectories: dict[str, dict[str, Any]]  # file stem -> trajectory
    judgments: dict[str, dict[str, Any]]  # file stem -> judgment (only those present)
    unreadable: tuple[str, ...]  # files that could not be parsed (reported, never silently skipped)
    stale: tuple[str, ...] = ()  # trajectories written under another config hash than run.json's (left out)


def _read_dir(path: AnyPath, bad: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if not path.is_dir():
        return out
    for f in sorted(path.glob("*.json")):
        if f.name.startswith("."):
            continue
        try:
            data = read_json(f)
        except (OSError, ValueError):
            bad.append(str(f))
            continue
        if isinstance(data, dict):
            out[f.stem] = data
        else:
            bad.append(str(f))
    return out


def load_run(run_dir: str | AnyPath) -> RunData:
    path = location(run_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"run directory {path} does not exist")
    bad: list[str] = []
    meta: dict[str, Any] = {}
    if (path / "run.json").is_file():
        try:
            meta = read_json(path / "run.json")
        except ValueError:
            bad.append(str(path / "run.json"))
    trajectories = _read_dir(path / "trajectories", bad)
    if not trajectories and not (path / "trajectories").is_dir():
        raise FileNotFoundError(f"{path} has no trajectories/ directory: is it a run directory of `rise-batch run`?")
    pinned = meta.get("config_hash")
    stale = [s for s, t in trajectories.items() if pinned and t.get("config_hash") not in (None, pinned)]
    for stem in stale:
        del trajectories[stem]
    return RunData(path, meta, trajectories, _read_dir(path / "judgments", bad), tuple(bad), tuple(stale))


def judgment_path(run_dir: str | AnyPath, stem: str) -> AnyPath:
    return location(run_dir) / "judgments" / f"{stem}.json"
