"""The directory a run's per-query workspaces live in: made and owned by the run, never a directory it was lent.

`run --workspace-root R` used to `mkdir -p R`, `chmod 0755 R` and delete whatever `R/<query>` it found: pointed at
an existing directory (a shared scratch directory of mode 1777, or /tmp itself) it stripped the sticky bit and
removed a user's `R/q1/`. Now the run claims R before the first workspace is made:

- R does not exist: the run creates it (mode 0755, so the sandbox's unprivileged uid can reach the workspaces) and
  writes the marker file `R/.rise-batch-workspaces` naming its run directory;
- R holds the marker: it is this run's (a resume; or, on a worker, the root its driver claimed);
- R exists and is empty: the run writes its marker and uses it, but leaves its mode alone (it did not make it);
- R holds anything else, or another run's marker: refused in one line naming R and the remedy, with nothing
  touched.

Whatever the run then removes under R (a dead worker's leftover workspace) is therefore its own. The default root,
RUN_DIR/workspaces, is claimed the same way, except that a run directory's own `workspaces/` made before the marker
existed is adopted: it is inside the run's own directory, and resuming such a run must keep working.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rise_batch.errors import ConfigError
from rise_batch.io import read_regular_file, write_json_atomic
from rise_batch.storage import AnyPath, is_local_path, redact

MARKER = ".rise-batch-workspaces"


def claim_workspace_root(root: Path, run_dir: str | AnyPath, *, default: bool, driver: bool = True) -> Path:
    """Make or accept `root` as this run's workspace root (see the module docstring); returns it.

    `default`: `root` is RUN_DIR/workspaces (adopted even without a marker). `driver`: the check made once before
    a run starts, which also refuses a root claimed by another run directory; a worker (`driver=False`) accepts any
    marker, since its working directory, and so how it would resolve a relative run directory, may differ."""
    owner = str(Path(run_dir).resolve()) if is_local_path(run_dir) else redact(run_dir)  # s3://: no keys kept
    created = False
    try:
        root.mkdir(parents=True)
        created = True
    except FileExistsError:
        if not root.is_dir():
            raise ConfigError(f"workspace root {root} exists and is not a directory: name a new directory") from None
    if not created:
        claimed_by = _marker_owner(root)
        if claimed_by is not None:
            if driver and claimed_by != owner:
                raise ConfigError(
                    f"workspace root {root} holds the workspaces of the run in {claimed_by}: give each run its own "
                    "--workspace-root (a directory that does not exist yet)"
                )
            return root
        foreign = sorted(n for n in os.listdir(root) if not _own_temporary(n))
        if foreign and not default:
            raise ConfigError(
                f"workspace root {root} already holds {len(foreign)} entr{'y' if len(foreign) == 1 else 'ies'} this "
                f"run did not make (first: {foreign[0]!r}); the run removes workspaces it finds there, so it only "
                "uses a directory it creates: name one that does not exist yet (or an empty one)"
            )
    write_json_atomic(root / MARKER, {"run_dir": owner, "created": created})
    if created:
        os.chmod(root, 0o755)  # only a directory the run made: the sandbox's unprivileged uid must reach it
    return root


def _marker_owner(root: Path) -> str | None:
    """The run directory named by `root`'s marker; None without one. A marker that is not the run's own file (a
    link, a FIFO, not JSON) is refused, naming it."""
    try:
        data = json.loads(read_regular_file(root / MARKER, below=root, max_bytes=65536))
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise ConfigError(f"workspace root {root}: its marker {MARKER} is not this project's ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("run_dir"), str):
        raise ConfigError(f"workspace root {root}: its marker {MARKER} names no run directory")
    return data["run_dir"]


def _own_temporary(name: str) -> bool:
    """The marker's temporary while another worker of this run writes it (see io's atomic writer)."""
    return name.startswith(f".{MARKER}.") and name.endswith(".tmp")
