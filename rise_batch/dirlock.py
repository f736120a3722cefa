"""One writer per output directory: `run`, `judge`, `sweep`, `structure` and `index` hold an exclusive lock on the
directory they write for as long as they run, so a command started twice (a retry script, a second terminal, a job
submitted again) is refused in one line naming the holder instead of paying for the same queries twice and
overwriting the first one's files.

- **On a file system** the lock is `fcntl.flock` on `OUT/.rise-batch.lock` (for `index`, whose directory is
  replaced whole when it is published, on `.OUT.rise-batch.lock` beside it). The kernel releases it when the
  holding process ends, however it ends: after `kill -9` the directory is usable at once, nothing stale to clean.
  The holder writes its host, pid, command and start time into the file, which is how the refusal names it; the
  file is emptied (never removed: removing a locked file lets two processes lock two different files) when the
  lock is released, so a command that failed before writing anything still leaves no directory behind
  (`io.remove_unused_outputs` removes trees of empty files).
- **On object storage** there is no lock, so a lease object `OUT/.rise-batch.lease` holds the same fields plus a
  token and an expiry (wall-clock seconds); the holder renews it every LEASE_TTL_S / 3 in a background thread and
  deletes it at the end. A writer that finds a live lease of another token is refused; one whose expiry has passed
  (its holder was killed, its node lost) is taken over, and so at once is one whose holder ran on this machine and
  no longer runs (`holder_is_gone`: same host, boot and pid namespace, no process of that pid and start time).
  Taking a lease writes it and reads it back after LEASE_SETTLE_S, so of two writers that both found none, the one
  whose object was overwritten sees it and is refused. Expiries compare clocks of different machines: LEASE_TTL_S
  is far above ordinary clock skew.

Locks are re-entrant per process (a sweep holds its OUT and every cell's run directory, and judges those cells
from its own threads) and scoped: `@holding(command)` on a driver releases, when it returns or raises, every lock
`claim`ed under it in that thread. A `claim` outside any `holding` is held until the process ends.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from rise_batch.errors import ConfigError
from rise_batch.io import make_output_dir
from rise_batch.storage import AnyPath, ObjectPath, location, redact

LOCK_FILE = ".rise-batch.lock"
LEASE_FILE = ".rise-batch.lease"
LEASE_TTL_S = 60.0
LEASE_SETTLE_S = 0.5

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


class DirectoryInUse(ConfigError):
    """Another command writes this directory now (exit 2): the message names it and what to do."""


def holder_record(command: str) -> dict[str, Any]:
    """Who holds a lock: what a refused command prints, and (in a lease) what tells whether it still runs."""
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record = {"host": socket.gethostname(), "pid": os.getpid(), "command": command, "since": since}
    return record | process_identity(os.getpid())


def process_identity(pid: int) -> dict[str, str]:
    """What names process `pid` on this machine beyond its number: the boot, the pid namespace and the process's
    start time (Linux /proc; empty elsewhere, and then no lease is ever judged dead before it expires)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        pidns = os.readlink("/proc/self/ns/pid")
        started = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return {}
    return {"boot": boot, "pidns": pidns, "started": started}


def holder_is_gone(lease: dict[str, Any]) -> bool:
    """The lease's holder ran on this machine, in this pid namespace, and that process no longer runs (a SIGKILLed
    command resumed on the same machine takes its lease at once, not after LEASE_TTL_S). A holder elsewhere is
    never judged gone: its lease expires."""
    here = process_identity(os.getpid())
    if not here or lease.get("host") != socket.gethostname():
        return False
    if (lease.get("boot"), lease.get("pidns")) != (here["boot"], here["pidns"]):
        return False
    pid = lease.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    now = process_identity(pid)  # {} when no process has that pid now
    return now.get("started") != lease.get("started")


def refusal(where: AnyPath, holder: dict[str, Any] | None, how: str) -> DirectoryInUse:
    who = (
        f"`{holder.get('command', 'a rise-batch command')}` (pid {holder.get('pid', '?')} on host "
        f"{holder.get('host', '?')}, since {holder.get('since', '?')}{how})"
        if holder
        else "another rise-batch command (it has not recorded itself yet)"
    )
    return DirectoryInUse(
        f"{redact(where)} is being written by {who}: one command writes a directory at a time. Wait for it to end "
        "(or stop it), then re-run this command to resume from what it wrote; or choose another output directory"
    )


class FileLock:
    """`flock` on a file: held until `release` or until this process ends."""

    def __init__(self, where: Path, path: Path, command: str) -> None:
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise refusal(where, read_record(path.read_bytes()), "") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder_record(command)).encode(), 0)
        self.fd = fd

    def release(self) -> None:
        os.ftruncate(self.fd, 0)  # emptied, never removed (see the module's docstring)
        os.close(self.fd)  # closing the last descriptor releases the flock


class Lease:
    """A lease object in object storage, renewed by a daemon thread until `release`."""

    def __init__(self, where: ObjectPath, path: ObjectPath, command: str) -> None:
        self.path, self.token = path, uuid.uuid4().hex
        self.record = holder_record(command) | {"token": self.token}
        found = self.read()
        if found and found.get("token") != self.token and live(found) and not holder_is_gone(found):
            raise refusal(where, found, lease_note(found))
        self.write()
        time.sleep(LEASE_SETTLE_S)  # a writer that read "none" just before our write has written by now
        found = self.read()
        if not found or found.get("token") != self.token:
            raise refusal(where, found, lease_note(found or {}))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.renew, name=f"lease {redact(where)}", daemon=True)
        self.thread.start()

    def read(self) -> dict[str, Any] | None:
        try:
            return read_record(self.path.read_bytes())
        except FileNotFoundError:
            return None

    def write(self) -> None:
        self.record["expires"] = time.time() + LEASE_TTL_S
        self.path.write_bytes(json.dumps(self.record).encode())

    def renew(self) -> None:
        while not self.stop.wait(LEASE_TTL_S / 3):
            try:
                found = self.read()
                if found and found.get("token") != self.token:
                    log.error("%s: the lease was taken over by %s; this command no longer holds it", self.path, found)
                    return
                self.write()
            except OSError as e:  # a transient storage error: the next renewal tries again, well before expiry
                log.warning("%s: lease not renewed (%s); retrying", self.path, e)

    def release(self) -> None:
        self.stop.set()
        self.thread.join()
        found = self.read()
        if found and found.get("token") == self.token:
            self.path.unlink(missing_ok=True)


def read_record(data: bytes) -> dict[str, Any] | None:
    """A lock file's or lease's record; None when empty or not ours to read (a lease that is not JSON is expired)."""
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def live(lease: dict[str, Any]) -> bool:
    expires = lease.get("expires")
    return isinstance(expires, (int, float)) and expires > time.time()


def lease_note(lease: dict[str, Any]) -> str:
    expires = lease.get("expires")
    if not isinstance(expires, (int, float)):
        return ""
    until = time.strftime("%H:%M:%SZ", time.gmtime(expires))
    return f"; its lease runs until {until} and is renewed while it runs, taken over {LEASE_TTL_S:.0f} s after it stops"


_HELD: dict[str, FileLock | Lease] = {}  # lock path -> what this process holds there
_HELD_LOCK = threading.Lock()
_SCOPES = threading.local()


def claim(out: str | os.PathLike | AnyPath, *, beside: bool = False) -> None:
    """Hold the lock of output directory `out` (made if missing) for the command this thread runs (its outermost
    `holding`), or raise DirectoryInUse naming who holds it. `beside`: the lock lives next to `out` (a directory
    replaced whole)."""
    where = location(out)
    home = where.parent if beside else where
    make_output_dir(home)
    scopes: list[tuple[str, list[str]]] = getattr(_SCOPES, "stack", [])
    command = scopes[0][0] if scopes else "rise-batch"
    with _HELD_LOCK:
        if isinstance(where, ObjectPath):
            path: AnyPath = home / (f".{where.name}{LEASE_FILE}" if beside else LEASE_FILE)
        else:
            path = home.resolve() / (f".{where.name}{LOCK_FILE}" if beside else LOCK_FILE)
        key = str(path)
        if key in _HELD:
            return
        _HELD[key] = Lease(where, path, command) if isinstance(path, ObjectPath) else FileLock(where, path, command)
    if scopes:
        scopes[0][1].append(key)  # released when the outermost driver of this thread ends


def holding(command: str) -> Callable[[F], F]:
    """A driver of `command` ("rise-batch run"): the locks `claim`ed under it are released when it ends (returns or
    raises), and name it to a command they refuse."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            stack = _SCOPES.__dict__.setdefault("stack", [])
            mine: list[str] = []
            stack.append((command, mine))
            try:
                return fn(*args, **kwargs)
            finally:
                stack.pop()
                for key in reversed(mine):
                    with _HELD_LOCK:
                        held = _HELD.pop(key, None)
                    if held is not None:
                        held.release()

        return wrapper  # type: ignore[return-value]

    return decorate
