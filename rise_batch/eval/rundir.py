"""Reading a run directory (run.json, trajectories/, judgments/) and writing judgments into it.

A run directory is the hand-off between the trajectory engine, the judge and the report (its files in docs/agents.md,
"What a run directory holds"), so everything here reads files and nothing else: a report can be rebuilt from a copied
run directory on a laptop. Judgments are keyed by the trajectory's file stem (already a safe name chosen by the
engine), so the two always pair up whatever the query ids look like."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, NamedTuple

import orjson

from rise_batch.eval.runcheck import clean_meta, judgment_problem, trajectory_problem
from rise_batch.io import RefusedFile, read_regular_file
from rise_batch.storage import AnyPath, ObjectPath, location

# A trajectory of 300 calls with full tool outputs is a few MB; nothing the engine writes comes near this bound.
RUN_FILE_MAX_BYTES = 64 * 2**20


class RunData(NamedTuple):
    path: AnyPath
    meta: dict[str, Any]  # run.json ({} when absent)
    trajectories: dict[str, dict[str, Any]]  # file stem -> trajectory
    judgments: dict[str, dict[str, Any]]  # file stem -> judgment (only those present)
    unreadable: tuple[str, ...]  # one line per file that could not be read: its path, then why (reported)
    stale: tuple[str, ...] = ()  # trajectories written under another config hash than run.json's (left out)
    cell: dict[str, Any] | None = None  # cell.json of a sweep cell (its labels), when there is one


def read_run_bytes(path: AnyPath, run_dir: AnyPath, max_bytes: int) -> bytes:
    """A run file's bytes, read as documents are (read_run_file); at most `max_bytes`."""
    if isinstance(path, ObjectPath):  # an object is only ever an object: no link, FIFO or device to refuse
        if path.stat().st_size > max_bytes:
            raise RefusedFile(f"{path} is over {max_bytes} bytes, more than a run file can be")
        return path.read_bytes()
    return read_regular_file(path, below=run_dir, max_bytes=max_bytes)


def read_run_file(path: AnyPath, run_dir: AnyPath) -> Any:
    """One run file's JSON. Read as documents are: a regular file below the run directory, no symbolic link on the
    way, at most RUN_FILE_MAX_BYTES; anything else is a RefusedFile (or ValueError, FileNotFoundError) whose
    message names the file. A run directory may come from anywhere (a copy, an archive), so none of it is trusted."""
    data = read_run_bytes(path, run_dir, RUN_FILE_MAX_BYTES)
    try:
        return orjson.loads(data)  # a few times faster than json; what it refuses, json decides (deep nesting, NaN)
    except orjson.JSONDecodeError:
        pass
    try:
        return _no_lone_surrogates(json.loads(data, parse_constant=_no_number))
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to be a run file; fix or remove it") from None
    except ValueError as e:  # UnicodeDecodeError too
        raise ValueError(f"{path}: not valid JSON ({e}); fix or remove it") from None


def _no_number(name: str) -> None:
    """NaN, Infinity and -Infinity (Python's json writes them; JSON has no such numbers) are read as null."""
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _no_lone_surrogates(obj: Any) -> Any:
    """`obj` with each lone surrogate (`\\ud800` escaped in the JSON: no character, and no UTF-8 can hold it) in
    its texts replaced by U+FFFD, so a report can write it out. json.loads joins the escapes of a real pair into one
    character, so any surrogate left is a lone one."""
    if isinstance(obj, str):
        return _SURROGATE.sub("\ufffd", obj)
    if isinstance(obj, list):
        return [_no_lone_surrogates(x) for x in obj]
    if isinstance(obj, dict):
        return {_no_lone_surrogates(k): _no_lone_surrogates(v) for k, v in obj.items()}
    return obj


def _read_dir(
    path: AnyPath, run_dir: AnyPath, bad: list[str], problem: Callable[[dict[str, Any]], str | None]
) -> dict[str, dict[str, Any]]:
    """The JSON objects of `path`/*.json whose fields pass `problem`; every other file is a line in `bad`."""
    out: dict[str, dict[str, Any]] = {}
    if not path.is_dir():
        return out
    for f in sorted(path.glob("*.json")):
        if f.name.startswith("."):
            continue
        try:
            data = read_run_file(f, run_dir)
        except (OSError, ValueError) as e:
            bad.append(_problem(f, e))
            continue
        if not isinstance(data, dict):
            bad.append(f"{f}: holds a JSON {type(data).__name__}, not an object; fix or remove it")
        elif why := problem(data):
            bad.append(f"{f}: {why}: not a file `rise-batch` wrote; fix or remove it")
        else:
            out[f.stem] = data
    return out


def _problem(path: AnyPath, e: BaseException) -> str:
    """One line naming `path` and what is wrong with it."""
    text = str(e) if isinstance(e, ValueError) else (e.strerror or str(e))
    return text if text.startswith(str(path)) else f"{path}: {text}"


def load_run(run_dir: str | AnyPath) -> RunData:
    path = location(run_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"run directory {path} does not exist")
    bad: list[str] = []
    meta = _read_meta(path, "run.json", bad) or {}
    trajectories = _read_dir(path / "trajectories", path, bad, trajectory_problem)
    if not trajectories and not (path / "trajectories").is_dir():
        raise FileNotFoundError(f"{path} has no trajectories/ directory: is it a run directory of `rise-batch run`?")
    pinned = meta.get("config_hash")
    stale = [s for s, t in trajectories.items() if pinned and t.get("config_hash") not in (None, pinned)]
    for stem in stale:
        del trajectories[stem]
    judgments = _read_dir(path / "judgments", path, bad, judgment_problem)
    cell = _read_meta(path, "cell.json", bad)
    return RunData(path, meta, trajectories, judgments, tuple(bad), tuple(stale), cell)


def _read_meta(path: AnyPath, name: str, bad: list[str]) -> dict[str, Any] | None:
    """run.json or cell.json as an object with its fields' types checked (None when absent); what is wrong with
    it is a line in `bad` (a file not an object is left out whole, a field of the wrong type alone)."""
    try:
        meta = read_run_file(path / name, path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        bad.append(_problem(path / name, e))
        return None
    if not isinstance(meta, dict):
        bad.append(f"{path / name}: holds a JSON {type(meta).__name__}, not an object; fix or remove it")
        return None
    return clean_meta(meta, str(path / name), bad)


def judgment_path(run_dir: str | AnyPath, stem: str) -> AnyPath:
    return location(run_dir) / "judgments" / f"{stem}.json"
