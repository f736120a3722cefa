"""Run an agent's shell command over a read-only directory, inside bubblewrap.

Workspace files are hardlinks that share inodes with the corpus, so the only thing that keeps an agent from
corrupting the corpus is that nothing it runs can write there: the directory is bind-mounted read-only, the host
file system is invisible apart from read-only system binaries, there is no network, the command gets its own PID
namespace (so `kill -9 -1` hits only itself) and a private size-capped /tmp. When the caller is root, bwrap runs as
an unprivileged host user, because the kernel exempts uid 0 from the process limit that stops fork bombs.

The process group is killed at the time cap; killing the outer bwrap tears the whole PID namespace down
(`--die-with-parent`), so children that moved to their own session die too. Output is read with a fixed memory
bound, so `yes` cannot eat the host's memory; only the first `max_output_chars` characters are kept.
"""

from __future__ import annotations

import functools
import logging
import os
import selectors
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from rise_batch.errors import CleanExit

log = logging.getLogger(__name__)

MOUNT_POINT = "/workspace"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
UNPRIVILEGED_ID = 65534  # "nobody": the host uid bwrap runs as when we are root
_CONTINUATION = bytes(range(0x80, 0xC0))  # UTF-8 continuation bytes: deleting them counts characters
_READ_CHUNK = 1 << 16


class SandboxUnavailable(CleanExit, RuntimeError):
    """bubblewrap is missing or cannot create namespaces here, and unsandboxed mode was not asked for (the message
    says what to install or pass; an entry point exits 2 with it)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Per-call limits. `timeout_s` is the wall-clock cap (60 s in the paper); the rest bound a runaway command."""

    timeout_s: float = 60.0
    max_output_chars: int = 4000
    max_procs: int = 256  # RLIMIT_NPROC inside the sandbox's user namespace: bounds fork bombs
    max_file_bytes: int = 256 << 20  # RLIMIT_FSIZE: one file written to /tmp
    tmp_bytes: int = 512 << 20  # size of the private tmpfs /tmp (and /dev/shm)
    address_space_bytes: int = 4 << 30  # RLIMIT_AS per process


class RunResult(NamedTuple):
    output: str  # at most max_output_chars characters of merged stdout+stderr
    exit_code: int | None  # None when the command was killed at the cap
    timed_out: bool
    cut_chars: int  # characters produced beyond what `output` keeps
    elapsed_s: float
    sandboxed: bool

    def render(self, timeout_s: float | None = None) -> str:
        """The text an agent sees: the output, a note of what was cut, then how the command ended."""
        parts = [self.output.rstrip("\n") if self.output else "(no output)"]
        if self.cut_chars:
            parts.append(f"[output truncated: {self.cut_chars:,} more characters not shown]")
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
    bwrap: str = ""  # the bwrap found on the caller's PATH: the one probed is the one run (not SANDBOX_PATH's)


def _bwrap_argv(bwrap: str, bind_fd: int, limits: SandboxLimits, command: str) -> list[str]:
    argv = [
        bwrap,
        "--unshare-all",
        "--unshare-user",  # --unshare-all only *tries* a user namespace; we need it (uid switch, no nesting)
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
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
    argv += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(limits.tmp_bytes),
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",
        "--size",
        str(limits.tmp_bytes),
        "--tmpfs",
        "/tmp",
        "--ro-bind-fd",  # by fd: the sandbox sees bwrap's argv in /proc/1/cmdline, which then holds no host path
        str(bind_fd),
        MOUNT_POINT,
        "--remount-ro",  # last: bwrap's own root tmpfs (where /x or /etc/x would land) becomes read-only too
        "/",
        "--chdir",
        MOUNT_POINT,
        "--clearenv",
    ]
    for key, value in _sandbox_env().items():
        argv += ["--setenv", key, value]
    return argv + ["/bin/bash", "-c", _with_limits(limits), "bash", command]


def _sandbox_env() -> dict[str, str]:
    return {"PATH": SANDBOX_PATH, "HOME": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb"}


def _with_limits(limits: SandboxLimits, nproc: bool = True) -> str:
    """A bash prologue that sets hard rlimits and then execs the agent's command as a fresh `bash -c`.

    The process limit is left out unsandboxed: outside a user namespace it counts all of the user's processes.
    """
    return (
        "ulimit -H -S " + (f"-u {limits.max_procs} " if nproc else "") + f"-f {max(1, limits.max_file_bytes // 1024)} "
        f"-v {max(1, limits.address_space_bytes // 1024)} -c 0 || exit 125; "
        'exec /bin/bash -c "$1"'
    )


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
    candidates: list[int | None] = [UNPRIVILEGED_ID, None] if os.geteuid() == 0 else [None]
    errors = []
    with tempfile.TemporaryDirectory(prefix="rise-probe-") as tmp:
        os.chmod(tmp, 0o755)
        for run_as in candidates:
            res = _spawn_collect(path, tmp, "true", SandboxLimits(timeout_s=20), run_as, sandboxed=True)
            if res.exit_code == 0:
                if run_as is None and os.geteuid() == 0:
                    log.warning(
                        "bwrap cannot run as uid %d here; running it as root, so fork bombs are bounded only by "
                        "the time cap (%s)",
                        UNPRIVILEGED_ID,
                        errors[-1] if errors else "",
                    )
                return Support(True, run_as, "", path)
            who = f"uid {run_as}" if run_as is not None else "the current user"
            errors.append(f"as {who}: {res.output.strip()[:300] or res.exit_code}")
    return Support(False, None, "bubblewrap cannot create its sandbox here: " + "; ".join(errors))


class Sandbox:
    """Runs shell commands with `root` as the only visible, read-only, directory (at /workspace)."""

    def __init__(
        self,
        root: str | Path,
        limits: SandboxLimits | None = None,
        *,
        allow_unsandboxed: bool = False,
        bwrap: str = "bwrap",
    ) -> None:
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise FileNotFoundError(f"sandbox root is not a directory: {self.root}")
        self.limits = limits or SandboxLimits()
        self.bwrap = bwrap
        support = probe(bwrap)
        self.bwrap = support.bwrap or bwrap
        self.sandboxed = support.ok
        self.run_as = support.run_as
        if self.run_as is not None and not _reachable_by_others(self.root):
            log.warning(
                "sandbox root %s is not reachable by uid %d (a parent directory lacks o+x); running bwrap as root, "
                "so fork bombs are bounded only by the time cap. Keep workspaces under a world-traversable "
                "directory (e.g. /tmp/rise-ws) to get the process limit back.",
                self.root,
                self.run_as,
            )
            self.run_as = None
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

    def run(self, command: str, limits: SandboxLimits | None = None) -> RunResult:
        """Run `command` under `limits` for this call only (default: the sandbox's own); nothing is stored."""
        return _spawn_collect(self.bwrap, self.root, command, limits or self.limits, self.run_as, self.sandboxed)

    def __call__(self, command: str) -> str:
        return self.run(command).render(self.limits.timeout_s)


@functools.cache
def _setpriv() -> str | None:
    from shutil import which

    return which("setpriv")


def _reachable_by_others(root: Path) -> bool:
    """Can the unprivileged uid reach and list `root`? (bwrap resolves the bind source as that uid.)"""
    for i, p in enumerate((root, *root.parents)):
        st = os.stat(p)
        need = stat.S_IXOTH | (stat.S_IROTH if i == 0 else 0)
        if st.st_uid != UNPRIVILEGED_ID and st.st_mode & need != need:
            return False
    return True


def _spawn_collect(
    bwrap: str, root: str | Path, command: str, limits: SandboxLimits, run_as: int | None, sandboxed: bool
) -> RunResult:
    start = time.monotonic()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if sandboxed:
            argv, cwd, pass_fds = _bwrap_argv(bwrap, fd, limits, command), "/", (fd,)
        else:
            argv, cwd, pass_fds = ["/bin/bash", "-c", _with_limits(limits, nproc=False), "bash", command], str(root), ()
        ids: dict = {}
        if run_as is not None:
            setpriv = _setpriv()
            if setpriv:  # exec-time switch keeps Popen on vfork; user= forces a fork() of this (large) process
                argv = [setpriv, f"--reuid={run_as}", f"--regid={run_as}", "--clear-groups", "--", *argv]
            else:
                ids = {"user": run_as, "group": run_as, "extra_groups": []}
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
    finally:
        os.close(fd)
    head, cut, timed_out = _collect(proc, start + limits.timeout_s, limits.max_output_chars)
    code = None if timed_out else proc.returncode
    return RunResult(head, code, timed_out, cut, time.monotonic() - start, sandboxed)


def _collect(proc: subprocess.Popen, deadline: float, max_chars: int) -> tuple[str, int, bool]:
    """Read merged output until EOF and exit or the deadline; keep ~4 bytes per kept character, count the rest."""
    assert proc.stdout is not None
    keep_bytes = 4 * max_chars + 4
    kept = bytearray()
    dropped_chars = 0
    timed_out = False
    out = proc.stdout
    with selectors.DefaultSelector() as sel:
        sel.register(out, selectors.EVENT_READ)
        eof = False
        while not eof:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            if not sel.select(remaining):
                continue
            chunk = os.read(out.fileno(), _READ_CHUNK)
            if not chunk:
                eof = True
            elif len(kept) < keep_bytes:
                room = keep_bytes - len(kept)
                kept += chunk[:room]
                dropped_chars += len(chunk[room:].translate(None, _CONTINUATION))
            else:
                dropped_chars += len(chunk.translate(None, _CONTINUATION))
    if not timed_out:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:  # closed its output but kept running
            timed_out = True
    if timed_out:
        _kill_group(proc)
        dropped_chars += _drain(out, grace_s=2.0)
    out.close()
    text = kept.decode("utf-8", errors="replace")
    cut = dropped_chars + max(0, len(text) - max_chars)
    return text[:max_chars], cut, timed_out


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _drain(out, grace_s: float) -> int:
    """Count what is still in the pipe after a kill; stop after `grace_s` (an unsandboxed orphan may hold it)."""
    end = time.monotonic() + grace_s
    n = 0
    with selectors.DefaultSelector() as sel:
        sel.register(out, selectors.EVENT_READ)
        while (remaining := end - time.monotonic()) > 0 and sel.select(remaining):
            chunk = os.read(out.fileno(), _READ_CHUNK)
            if not chunk:
                break
            n += len(chunk.translate(None, _CONTINUATION))
    return n
