"""Run an agent's shell command over a read-only directory, inside bubblewrap.

Workspace files are hardlinks that share inodes with the corpus, so the only thing that keeps an agent from
corrupting the corpus is that nothing it runs can write there: the directory is bind-mounted read-only, the host
file system is invisible apart from read-only system binaries, there is no network, the command gets its own PID
namespace (so `kill -9 -1` hits only itself) and a private size-capped /tmp. When the caller is root, bwrap runs as
an unprivileged host user, because the kernel exempts uid 0 from the process limit that stops fork bombs; where it
cannot (a workspace that user cannot reach, no user namespaces for it), the sandbox refuses and says why rather than
run as root. Commands see /proc read-only (they cannot un-nice their session's autogroup) and cannot make keyring
system calls (seccomp.py), so nothing set for a call, or left by one, reaches the next.

The process group is killed at the time cap; killing the outer bwrap tears the whole PID namespace down
(`--die-with-parent`), so children that moved to their own session die too. Output is read with a fixed memory
bound, so `yes` cannot eat the host's memory; only the first `max_output_chars` characters are kept (output.py).
Beyond these per-process limits, a call as a whole is bounded where the machine allows it (bounds.py): its own
memory cgroup, /tmp with an inode cap, and no host path in the sandbox's mountinfo.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import logging
import math
import os
import platform
import stat
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, fields
from pathlib import Path
from typing import NamedTuple

from rise_batch.errors import CleanExit, ConfigError
from rise_batch.space import bounds, seccomp
from rise_batch.space.output import collect
from rise_batch.space.session import Session, SessionUnavailable, close_later

log = logging.getLogger(__name__)

MOUNT_POINT = "/workspace"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
UNPRIVILEGED_ID = 65534  # "nobody": the host uid bwrap runs as when we are root
MAX_ARG_STRLEN = 32 * 4096  # Linux's limit on one argument (the command is one), including its NUL


class SandboxUnavailable(CleanExit, RuntimeError):
    """bubblewrap is missing or cannot create namespaces here, and unsandboxed mode was not asked for (the message
    says what to install or pass; an entry point exits 2 with it)."""


def check_limit(name: str, value: object, *, integer: bool = False) -> None:
    """ConfigError naming `name` unless `value` is a finite number > 0 (an int where `integer`): NaN compares
    false with everything, so `value <= 0` alone lets it through, and inf would mean no limit at all."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    if not ok or (integer and not float(value).is_integer()):
        what = "a whole number" if integer else "a finite number"
        raise ConfigError(f"{name} must be {what} > 0, got {value!r}")


@dataclass(frozen=True)
class SandboxLimits:
    """Per-call limits. `timeout_s` is the wall-clock cap (60 s in the paper); the rest bound a runaway command.
    `memory_bytes` bounds the whole call (processes, /tmp pages, kernel memory) where a cgroup can be made."""

    timeout_s: float = 60.0
    max_output_chars: int = 4000
    max_procs: int = 256  # RLIMIT_NPROC inside the sandbox's user namespace: bounds fork bombs
    max_file_bytes: int = 256 << 20  # RLIMIT_FSIZE: one file written to /tmp
    tmp_bytes: int = 512 << 20  # size of the private tmpfs /tmp (and /dev/shm)
    address_space_bytes: int = 4 << 30  # RLIMIT_AS per process
    memory_bytes: int = 2 << 30  # the call's cgroup memory limit
    tmp_inodes: int = 16384  # files and directories in /tmp (and /dev/shm): each costs kernel memory
    # the command's niceness (0 = the harness's own): the agent's commands yield the CPU to the harness's tool
    # plumbing (search, linking, model calls) on a loaded machine. Each call is its own session, which the kernel's
    # autogroup scheduling makes a group as heavy as a whole trajectory actor; so the session's autogroup is niced too.
    nice: int = 10

    def __post_init__(self) -> None:
        check_limit("timeout_s", self.timeout_s)
        for f in fields(self)[1:]:
            if f.name != "nice":
                check_limit(f.name, getattr(self, f.name), integer=True)
        if not isinstance(self.nice, int) or isinstance(self.nice, bool) or not 0 <= self.nice <= 19:
            raise ConfigError(f"nice must be a whole number from 0 to 19, got {self.nice!r}")


class RunResult(NamedTuple):
    output: str  # at most max_output_chars characters of merged stdout+stderr
    exit_code: int | None  # None when the command was killed at the cap
    timed_out: bool
    cut_chars: int  # characters produced beyond what `output` keeps
    elapsed_s: float
    sandboxed: bool
    memory_exceeded: bool = False  # the kernel killed a process of the call at its memory limit
    # ms per phase, measured: the long-lived sandbox's lock_ms (waiting for the sandbox: its lock, a session
    # (re)start), start_ms (the call started inside it) and exec_ms (the command until its end and output);
    # a one-shot bubblewrap has only oneshot_ms (its start and the command are one process chain)
    phases: dict[str, float] | None = None

    def render(self, timeout_s: float | None = None) -> str:
        """The text an agent sees: the output, a note of what was cut, then how the command ended."""
        parts = [self.output.rstrip("\n") if self.output else "(no output)"]
        if self.cut_chars:
            parts.append(f"[output truncated: {self.cut_chars:,} more characters not shown]")
        if self.memory_exceeded:
            parts.append("[killed: the command exceeded the memory limit of one call (its processes and /tmp)]")
        if self.timed_out:
            cap = f"{timeout_s:g} s " if timeout_s is not None else ""
            parts.append(f"[killed: exceeded the {cap}time limit; the command and all its processes were stopped]")
        else:
            parts.append(f"[exit code: {self.exit_code}]")
        return "\n".join(parts)


class Support(NamedTuple):
    ok: bool
    run_as: int | None  # host uid/gid bwrap runs as (None: as the caller)
    reason: str
    isolated: bool = False  # calls start in a private mount namespace (bounds.ISOLATE)
    isolation_error: str = ""  # why they do not, where the host would allow it
    bwrap: str = ""  # the bwrap found on the caller's PATH: the one probed is the one run (not SANDBOX_PATH's)


def _bwrap_argv(
    bwrap: str,
    bind_fd: int,
    limits: SandboxLimits,
    program: list[str],
    isolated: bool,
    caps: str = "--cap-drop",
    seccomp_fd: int | None = None,
) -> list[str]:
    """bwrap running `program`. A one-shot call drops every capability and sees /proc read-only; a long-lived
    sandbox's supervisor keeps them (`caps="--cap-add"`) inside the sandbox's user namespace to make each call's
    namespaces and mounts, and gives each command a read-only /proc and no capabilities (supervisor.py).

    No `--new-session`: the caller's Popen starts a session (no controlling terminal to write to), and the call's
    processes stay in it, whose autogroup is niced (`_nice_session`); a read-only /proc keeps them from un-nicing it.
    `seccomp_fd` holds the filter that denies the kernel keyring (seccomp.py)."""
    argv = [
        bwrap,
        "--unshare-all",
        "--unshare-user",  # --unshare-all only *tries* a user namespace; we need it (uid switch, no nesting)
        "--disable-userns",
        "--die-with-parent",
        caps,
        "ALL",
        "--uid",
        str(UNPRIVILEGED_ID),
        "--gid",
        str(UNPRIVILEGED_ID),
        "--hostname",
        "sandbox",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), f"/{name}"]
    # Only what the text tools need from /etc: the linker cache and Debian's alternatives (awk -> mawk).
    for etc in ("/etc/alternatives", "/etc/ld.so.cache", "/etc/localtime"):
        if os.path.exists(etc):
            argv += ["--ro-bind", etc, etc]
    # By fd: the sandbox sees bwrap's argv in /proc/1/cmdline, which then holds no host path. Isolated, the host
    # mounted the overlay workspace and the inode-capped tmpfs mounts and hands them over as fds 5, 6, 7.
    if isolated:
        shm, tmp, ws = ["--bind-fd", "7", "/dev/shm"], ["--bind-fd", "6", "/tmp"], ["--ro-bind-fd", "5", MOUNT_POINT]
    else:
        size = ["--size", str(limits.tmp_bytes)]
        shm, tmp, ws = [*size, "--tmpfs", "/dev/shm"], [*size, "--tmpfs", "/tmp"], ["--ro-bind-fd", str(bind_fd)]
        ws.append(MOUNT_POINT)
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    # one-shot: no write to /proc (its autogroup, oom_score_adj); the supervisor needs its own /proc writable
    proc = ["--remount-ro", "/proc"] if caps == "--cap-drop" else []
    argv += [
        "--proc",
        "/proc",
        *proc,
        "--dev",
        "/dev",
        *shm,
        "--remount-ro",
        "/dev",
        *tmp,
        *ws,
        "--remount-ro",  # last: bwrap's own root tmpfs (where /x or /etc/x would land) becomes read-only too
        "/",
        "--chdir",
        MOUNT_POINT,
        "--clearenv",
    ]
    for key, value in _sandbox_env().items():
        argv += ["--setenv", key, value]
    return argv + program


def _one_shot(limits: SandboxLimits, command: str) -> list[str]:
    return ["/bin/bash", "-c", _with_limits(limits), "bash", command]


def _request(command: str, limits: SandboxLimits) -> dict:
    """One call for a long-lived sandbox's supervisor (supervisor.py)."""
    return {
        "command": command,
        "cwd": MOUNT_POINT,
        "env": _sandbox_env(),
        "rlimits": _rlimits(limits),
        "tmp_bytes": limits.tmp_bytes,
        "tmp_inodes": limits.tmp_inodes,
        "nice": limits.nice,
    }


def _rlimits(limits: SandboxLimits) -> dict[str, int]:
    """The hard rlimits of `_with_limits`, in bytes as `ulimit` sets them (whole KiB), for the supervisor."""
    return {
        "RLIMIT_NPROC": limits.max_procs,
        "RLIMIT_FSIZE": max(1, limits.max_file_bytes // 1024) * 1024,
        "RLIMIT_AS": max(1, limits.address_space_bytes // 1024) * 1024,
        "RLIMIT_CORE": 0,
    }


def _sandbox_env() -> dict[str, str]:
    return {"PATH": SANDBOX_PATH, "HOME": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb"}


def _with_limits(limits: SandboxLimits, nproc: bool = True) -> str:
    """A bash prologue that sets hard rlimits and then execs the agent's command as a fresh `bash -c`.

    The process limit is left out unsandboxed: outside a user namespace it counts all of the user's processes.
    """
    return (
        "ulimit -H -S " + (f"-u {limits.max_procs} " if nproc else "") + f"-f {max(1, limits.max_file_bytes // 1024)} "
        f"-v {max(1, limits.address_space_bytes // 1024)} -c 0 || exit 125; "
        + (f'exec /usr/bin/nice -n {limits.nice} /bin/bash -c "$1"' if limits.nice else 'exec /bin/bash -c "$1"')
    )


def _nice_session(pid: int, nice: int) -> None:
    """Nice the autogroup of the session `pid` leads (a one-shot call's: Popen made it), from the host, where /proc
    is writable; best effort, as supervisor.nice_session_group (unprivileged, the kernel allows one autogroup change
    per 100 ms machine-wide)."""
    if nice:
        try:
            with open(f"/proc/{pid}/autogroup", "w") as f:
                f.write(str(nice))
        except OSError:
            pass


@functools.cache
def probe(bwrap: str = "bwrap") -> Support:
    """Can bwrap run our exact sandbox here? Checked once per process, as the unprivileged uid when root."""
    from shutil import which

    found = which(bwrap)
    if found is None:
        return Support(
            False, None, f"bubblewrap (`{bwrap}`) is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
        )
    # Run the bwrap PATH found (spawns look names up in SANDBOX_PATH), by name where that is the same file, so no
    # host path lands in the sandbox's /proc/1/cmdline.
    same = os.path.realpath(which(bwrap, path=SANDBOX_PATH) or "/nonexistent") == os.path.realpath(found)
    path = bwrap if same else found
    # Never as root: the kernel exempts uid 0 from the process-count limit, so a fork bomb would meet only the cap.
    candidates: list[int | None] = [UNPRIVILEGED_ID] if os.geteuid() == 0 else [None]
    modes = [True, False] if bounds.host_bounds().isolated else [False]
    errors = []
    with tempfile.TemporaryDirectory(prefix="rise-probe-") as tmp:
        os.chmod(tmp, 0o755)
        for run_as in candidates:
            for isolated in modes:
                res = _spawn_collect(path, tmp, "true", SandboxLimits(timeout_s=20), run_as, True, isolated)
                who = f"uid {run_as}" if run_as is not None else "the current user"
                if res.exit_code != 0:
                    mode = " in a private mount namespace" if isolated else ""
                    errors.append(f"as {who}{mode}: {res.output.strip()[:300] or res.exit_code}")
                    continue
                return Support(True, run_as, "", isolated, "; ".join(errors), path)
    reason = "bubblewrap cannot create its sandbox here: " + "; ".join(errors)
    if os.geteuid() == 0:
        reason += (
            f" (as root it runs as uid {UNPRIVILEGED_ID}, never as root, where the kernel lifts the process-count "
            "limit: allow that uid unprivileged user namespaces, e.g. sysctl kernel.unprivileged_userns_clone=1 or "
            "kernel.apparmor_restrict_unprivileged_userns=0, or run as a non-root user)"
        )
    return Support(False, None, reason)


@functools.cache
def announce(support: Support, memory_bytes: int, tmp_bytes: int, tmp_inodes: int, max_procs: int) -> str:
    """The one start-up line saying which limits bound a call here: logged once per process (a warning when the
    machine cannot bound a call's memory or /tmp's inodes, or deny the keyring, so nobody believes in a limit that
    is not there)."""
    if not support.ok:
        return ""
    host = bounds.host_bounds()
    if host.isolated and not support.isolated:
        host = dataclasses.replace(host, isolated=False, reason=support.isolation_error or "probe failed")
    who = f"uid {support.run_as}" if support.run_as is not None else "this uid"
    keyring = seccomp.program() is not None
    line = (
        f"{host.describe(memory_bytes, tmp_bytes, tmp_inodes)}; at most {max_procs} processes per call "
        f"(RLIMIT_NPROC, as {who} in the sandbox's user namespace); "
        + (
            "kernel keyring denied (seccomp)"
            if keyring
            else f"kernel keyring NOT denied (no filter for {platform.machine()})"
        )
        + "; /proc read-only for commands"
    )
    log.log(logging.INFO if host.cgroup.ok and host.isolated and keyring else logging.WARNING, line)
    return line


class Sandbox:
    """Runs shell commands with `root` as the only visible, read-only, directory (at /workspace).

    `persistent` (the default): one long-lived bubblewrap for this sandbox, started at its first call, with each
    command in its own namespaces inside it (session.py, supervisor.py); every call still starts from a fresh
    /tmp, sees only its own processes and dies whole at its time cap. False, or where that sandbox cannot start:
    a bubblewrap per call. `close()` (or dropping the object, or IDLE_EXIT_S without a call) ends it."""

    def __init__(
        self,
        root: str | Path,
        limits: SandboxLimits | None = None,
        *,
        allow_unsandboxed: bool = False,
        bwrap: str = "bwrap",
        persistent: bool = True,
    ) -> None:
        self.persistent = persistent
        self._session: Session | None = None
        self._close_session: weakref.finalize | None = None
        self._lock = threading.Lock()
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise FileNotFoundError(f"sandbox root is not a directory: {self.root}")
        self.limits = limits or SandboxLimits()
        self.bwrap = bwrap
        support = probe(bwrap)
        self.bwrap = support.bwrap or bwrap
        self.sandboxed = support.ok
        self.run_as = support.run_as
        self.isolated = support.isolated
        lim = self.limits
        self.bounds_line = announce(support, lim.memory_bytes, lim.tmp_bytes, lim.tmp_inodes, lim.max_procs)
        if self.run_as is not None:
            problem = _unreachable(self.root, self.isolated, support.isolation_error or bounds.host_bounds().reason)
            if problem:
                raise SandboxUnavailable(problem)
        if support.ok and (problem := self._mounted_below()):
            raise SandboxUnavailable(problem)
        if not support.ok:
            if not allow_unsandboxed:
                raise SandboxUnavailable(
                    f"{support.reason}. Refusing to run agent commands without a sandbox: hardlinked workspace "
                    "files share inodes with the corpus. Install bubblewrap, or opt in explicitly to UNSANDBOXED "
                    "mode (allow_unsandboxed=True / --unsandboxed) on a disposable copy of the corpus."
                )
            msg = (
                f"!!! UNSANDBOXED bash: {support.reason}. Agent commands run as this user with full access to "
                "the host, its network and the corpus files (a write through a hardlink changes the corpus). !!!"
            )
            log.warning(msg)
            print(msg, file=sys.stderr)
        elif self.persistent:
            with self._lock:  # now, so a trajectory's first command does not wait for it under its time cap
                self._live_session()

    def run(self, command: str, limits: SandboxLimits | None = None) -> RunResult:
        """Run `command` under `limits` for this call only (default: the sandbox's own); nothing is stored."""
        limits = limits or self.limits
        start = time.monotonic()
        if self.sandboxed and (problem := self._mounted_below()):  # mounted since: nothing runs
            self.close()
            return RunResult(f"refused: {problem}", 126, False, 0, time.monotonic() - start, True)
        if len(command.encode(errors="surrogateescape")) >= MAX_ARG_STRLEN:  # what execve would refuse
            raise OSError(errno.E2BIG, os.strerror(errno.E2BIG))
        if self.sandboxed and self.persistent:
            with self._lock:  # one call at a time: the session's memory cgroup bounds one call
                for _ in range(2):  # a session that ended (idle, killed) before the call started: a new one
                    session = self._live_session()
                    if session is None:
                        break
                    # from `start`: the cap may be the time left in a trajectory (tools.bash_in)
                    deadline, request = start + limits.timeout_s, _request(command, limits)
                    ready = time.monotonic()
                    done = session.run(request, limits.memory_bytes, deadline, limits.max_output_chars)
                    if done is not None:
                        head, cut, timed_out, code, oom, started = done
                        end = time.monotonic()
                        phases = {"lock_ms": ready - start, "start_ms": started - ready, "exec_ms": end - started}
                        phases = {k: round(v * 1000, 2) for k, v in phases.items()}
                        return RunResult(head, code, timed_out, cut, end - start, True, oom, phases)
        res = _spawn_collect(self.bwrap, self.root, command, limits, self.run_as, self.sandboxed, self.isolated)
        return res._replace(phases={"oneshot_ms": round((time.monotonic() - start) * 1000, 2)})

    def _mounted_below(self) -> str:
        """Why this sandbox must not run ("" when it may): bwrap binds its root recursively, so outside a private
        mount namespace a mount point below the root (a bind mount of /etc in a shared docs dir) would show what it
        holds to agent commands. The isolated sandbox's overlay does not cross mount points: nothing to check."""
        if self.isolated:
            return ""
        found = bounds.mounts_below(self.root)
        if not found:
            return ""
        return (
            f"sandbox root {self.root} has a mount point below it ({found[0]}): agent commands would see what is "
            "mounted there; unmount it (or run as root, where the sandbox's own overlay does not cross mounts)"
        )

    def _live_session(self) -> Session | None:
        """This sandbox's running session, started if needed; None (one-shot calls from now on) if it cannot."""
        if self._session is not None and self._session.alive:
            return self._session
        self.close()
        host = bounds.host_bounds()
        if self.run_as is not None and _setpriv() is None:
            # Popen would have to switch the uid before the cgroup and mount prefixes
            self.persistent = False
            return None
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        filter_fd = seccomp.filter_fd()
        try:
            self._session = Session(
                lambda program: _launch_argv(
                    self.bwrap, self.root, fd, self.limits, self.run_as, self.isolated, program, "--cap-add", filter_fd
                ),
                host.cgroup if host.cgroup.ok else None,
                self.limits.memory_bytes,
                _sandbox_env(),
                nice=self.limits.nice,
                pass_fds=(() if self.isolated else (fd,)) + (() if filter_fd is None else (filter_fd,)),
                check=_request("true", self.limits),
            )
        except (SessionUnavailable, OSError) as e:
            _fall_back(str(e))
            self.persistent = False
            return None
        finally:
            os.close(fd)
            if filter_fd is not None:
                os.close(filter_fd)
        # dropped without close(): ended in the session reaper's thread, never in the collecting one (session.py)
        self._close_session = weakref.finalize(self, close_later, self._session)
        return self._session

    def close(self) -> None:
        """End the long-lived sandbox, if one runs, before returning (the next call would start another)."""
        if self._close_session is not None:
            self._close_session.detach()
        session, self._session, self._close_session = self._session, None, None
        if session is not None:
            session.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __call__(self, command: str) -> str:
        return self.run(command).render(self.limits.timeout_s)


@functools.cache
def _fall_back(reason: str) -> None:
    """Said once per reason and process: calls run one bubblewrap each, slower but with the same bounds."""
    log.warning("the long-lived sandbox cannot start here, so every call starts its own bubblewrap: %s", reason)


@functools.cache
def _setpriv() -> str | None:
    from shutil import which

    return which("setpriv")


def _unreachable(root: Path, isolated: bool, why_not_isolated: str) -> str:
    """Why the unprivileged uid the commands run as could not list `root` in the sandbox ("" when it can).

    Isolated, the host (root) mounts the workspace and hands it to bwrap by descriptor, so only `root` itself must
    be readable by that uid, wherever it lies (under /root, say); otherwise bwrap resolves the bind source as that
    uid, so every parent must let it through. There is no falling back to bwrap as root: the kernel exempts uid 0
    from the process-count limit."""
    st = os.stat(root)
    if st.st_uid != UNPRIVILEGED_ID and st.st_mode & 0o005 != 0o005:
        return (
            f"sandbox root {root} is not readable by uid {UNPRIVILEGED_ID}, the user sandboxed commands run as "
            f"(mode {stat.S_IMODE(st.st_mode):04o}); make it world-readable (chmod o+rx)"
        )
    for parent in () if isolated else root.parents:
        st = os.stat(parent)
        if st.st_uid != UNPRIVILEGED_ID and not st.st_mode & stat.S_IXOTH:
            return (
                f"sandbox root {root} is not reachable by uid {UNPRIVILEGED_ID}, the user sandboxed commands run as "
                f"({parent} lacks o+x), and this host gives the sandbox no private mount namespace to hand it over "
                f"without its path ({why_not_isolated}); keep workspaces under a world-traversable directory "
                "(e.g. /tmp/rise-ws)"
            )
    return ""


def _launch_argv(
    bwrap: str,
    root: str | Path,
    fd: int,
    limits: SandboxLimits,
    run_as: int | None,
    isolated: bool,
    program: list[str],
    caps: str = "--cap-drop",
    seccomp_fd: int | None = None,
) -> list[str]:
    """[private mounts] -> [drop to run_as] -> bwrap -> program (the cgroup join, if any, goes in front)."""
    argv = _bwrap_argv(bwrap, fd, limits, program, isolated, caps, seccomp_fd)
    setpriv = _setpriv() if run_as is not None else None
    if setpriv:  # exec-time switch keeps Popen on vfork; user= forces a fork() of this (large) process
        argv = [setpriv, f"--reuid={run_as}", f"--regid={run_as}", "--clear-groups", "--", *argv]
    if isolated:
        argv = bounds.isolate_argv(bounds.host_bounds(), Path(root), limits.tmp_bytes, limits.tmp_inodes) + argv
    return argv


def _spawn_collect(
    bwrap: str,
    root: str | Path,
    command: str,
    limits: SandboxLimits,
    run_as: int | None,
    sandboxed: bool,
    isolated: bool = False,
) -> RunResult:
    """Run one call: [join its cgroup] -> [private mounts] -> [drop to run_as] -> bwrap -> rlimits -> command."""
    start = time.monotonic()
    host = bounds.host_bounds()
    setpriv = _setpriv() if run_as is not None else None
    # the prefixes run as the caller; without setpriv, Popen switches the uid before any of them could
    made = host.cgroup.ok and (setpriv or not run_as)
    cgroup = bounds.CallCgroup(host.cgroup, limits.memory_bytes, limits.nice) if made else None
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    filter_fd = seccomp.filter_fd() if sandboxed else None
    try:
        if sandboxed:  # isolated, the workspace is reopened by path in the call's own mount namespace
            argv = _launch_argv(
                bwrap, root, fd, limits, run_as, isolated, _one_shot(limits, command), seccomp_fd=filter_fd
            )
            cwd, pass_fds = "/", (() if isolated else (fd,)) + (() if filter_fd is None else (filter_fd,))
        else:
            argv, cwd, pass_fds = ["/bin/bash", "-c", _with_limits(limits, nproc=False), "bash", command], str(root), ()
        ids: dict = {}
        if run_as is not None and not setpriv:
            ids = {"user": run_as, "group": run_as, "extra_groups": []}
        if cgroup is not None:
            argv = bounds.join_argv(cgroup) + argv
        # A minimal env for bwrap itself too: /proc/1/environ inside the sandbox is bwrap's, and must not leak
        # the host's API keys.
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=_sandbox_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=pass_fds,
            start_new_session=True,
            **ids,
        )
    except BaseException:
        if cgroup is not None:
            cgroup.close()
        raise
    finally:
        os.close(fd)
        if filter_fd is not None:
            os.close(filter_fd)
    _nice_session(proc.pid, limits.nice)
    try:
        head, cut, timed_out = collect(proc, start + limits.timeout_s, limits.max_output_chars)
        oom = cgroup is not None and cgroup.oom_killed()
    finally:
        if cgroup is not None:
            cgroup.close()
    code = None if timed_out else proc.returncode
    return RunResult(head, code, timed_out, cut, time.monotonic() - start, sandboxed, oom)
