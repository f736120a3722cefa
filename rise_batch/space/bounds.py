"""What bounds one sandboxed call as a whole, beyond bwrap's per-process rlimits, and how the host sets it up.

Per-process limits do not bound a call: a command can hold gigabytes across processes, in its /tmp (tmpfs pages
belong to nobody's address space) and in kernel memory (300k empty files in /tmp cost ~380 MB of inodes, which a
tmpfs `size=` does not cap). So, where the machine allows it:

- every call runs in its own memory cgroup (v2 `memory.max`, or v1 `memory.limit_in_bytes` on hybrid hosts), which
  charges the processes, their tmpfs pages and their kernel memory together; the cgroup is a child of this
  process's own cgroup (root, or a delegated subtree), so the host's accounting above it still applies;
- when we are root, the call starts in a private mount namespace where the host mounts /tmp and /dev/shm itself
  with `nr_inodes` (bwrap's `--tmpfs` has no inode option), and the workspace as a read-only overlay built from
  file descriptors, so /proc/self/mountinfo in the sandbox names no host path (a bind mount would show its source
  path there). None of these mounts is visible on the host; they vanish with the call.

`host_bounds()` says once per process what holds here; `HostBounds.describe()` is the one start-up line.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import logging
import os
import shutil
import signal
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_PREFIX = "rise-sandbox-"
_STAGING = ("ws", "empty", "tmp", "shm")
_NAMES = itertools.count()


# The kernel's sched_prio_to_weight for nice 0..19: what a task (or an autogroup) of that niceness weighs against
# one of nice 0 (1024). A call's cpu cgroup gets the weight of the call's niceness.
NICE_WEIGHTS = (1024, 820, 655, 526, 423, 335, 272, 215, 172, 137, 110, 87, 70, 56, 45, 36, 29, 23, 18, 15)


@dataclass(frozen=True)
class CgroupSupport:
    ok: bool
    version: int = 0  # 1 or 2
    parent: Path | None = None  # the cgroup directory our per-call cgroups are made in
    reason: str = ""
    # where per-call cpu cgroups are made (v2: `parent`, with the cpu controller delegated; v1: the cpu hierarchy's
    # own directory), None where the cpu controller is not ours to use
    cpu_parent: Path | None = None


def cpu_weight(version: int, nice: int) -> tuple[str, str]:
    """(file, value) that gives a cpu cgroup the weight of `nice`: v1 `cpu.shares` (1024 at nice 0), v2
    `cpu.weight` (100 at nice 0)."""
    w = NICE_WEIGHTS[max(0, min(nice, len(NICE_WEIGHTS) - 1))]
    return ("cpu.shares", str(w)) if version == 1 else ("cpu.weight", str(max(1, round(w * 100 / 1024))))


def _own_cgroups() -> dict[str, str]:
    """{controller or "" (v2): path} of this process, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def _mounts(fstype: str) -> list[tuple[str, set[str]]]:
    """(mount point, super options) of every mount of `fstype` in this mount namespace."""
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        left, right = line.split(" - ", 1)
        kind, _source, opts = (right.split(" ") + ["", ""])[:3]
        if kind == fstype:
            found.append((left.split(" ")[4].replace("\\040", " "), set(opts.split(","))))
    return found


def mounts_below(root: Path) -> list[str]:
    """Mount points strictly below `root` (a resolved path) in this mount namespace. bwrap's binds are recursive,
    so a sandbox that binds `root` itself would show what each of them holds (a bind mount of /etc planted in a
    shared docs dir); the isolated sandbox's overlay does not cross them."""
    top = str(root).rstrip("/") + "/"
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    points = (_unescape(line.split(" ")[4]) for line in lines)
    return sorted(p for p in points if p.startswith(top))


def _unescape(field: str) -> str:
    """A mountinfo path field: space, tab, newline and backslash are written as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _try_child(parent: Path, version: int, cpu_parent: Path | None = None) -> CgroupSupport:
    probe = parent / f"{CGROUP_PREFIX}probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as e:
        return CgroupSupport(False, reason=f"cannot create a cgroup under {parent} ({e.strerror})")
    return CgroupSupport(True, version, parent, cpu_parent=cpu_parent)


def _delegate(parent: Path, controller: str) -> bool:
    """Is `controller` enabled for the children of the v2 cgroup `parent` (enabled now if it can be)?"""
    try:
        if controller not in (parent / "cgroup.controllers").read_text().split():
            return False
        if controller not in (parent / "cgroup.subtree_control").read_text().split():
            (parent / "cgroup.subtree_control").write_text(f"+{controller}")  # EBUSY unless a delegated leaf
        return True
    except OSError:
        return False


def _detect_cgroup() -> CgroupSupport:
    own = _own_cgroups()
    if "" in own:
        for mnt, _ in _mounts("cgroup2"):
            parent = Path(mnt) / own[""].lstrip("/")
            try:
                if "memory" not in (parent / "cgroup.controllers").read_text().split():
                    continue
            except OSError:
                continue
            if not _delegate(parent, "memory"):
                return CgroupSupport(False, reason=f"cgroup v2 at {parent} cannot delegate memory")
            return _try_child(parent, 2, parent if _delegate(parent, "cpu") else None)
    if "memory" in own:
        for mnt, opts in _mounts("cgroup"):
            if "memory" in opts:
                return _try_child(Path(mnt) / own["memory"].lstrip("/"), 1, _v1_cpu_parent(own))
    return CgroupSupport(False, reason="no memory cgroup controller is available to this process")


def _v1_cpu_parent(own: dict[str, str]) -> Path | None:
    """This process's directory in the v1 cpu hierarchy, if a child can be made there."""
    if "cpu" not in own:
        return None
    for mnt, opts in _mounts("cgroup"):
        if "cpu" in opts:
            parent = Path(mnt) / own["cpu"].lstrip("/")
            probe = parent / f"{CGROUP_PREFIX}probe-{os.getpid()}"
            try:
                probe.mkdir()
                probe.rmdir()
                return parent
            except OSError:
                return None
    return None


def _sweep_stale(parent: Path) -> None:
    """Remove per-call cgroups a killed process of ours left behind (empty ones only: rmdir refuses the others)."""
    for d in parent.glob(f"{CGROUP_PREFIX}*"):
        pid = d.name[len(CGROUP_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            try:
                d.rmdir()
            except OSError:
                pass


class CallCgroup:
    """One call's cgroup (or a long-lived sandbox's, whose calls run one at a time): made before it, joined by its
    first process, removed after. It bounds memory and, where the cpu controller is ours, holds the call's CPU
    weight: the weight of its niceness, whatever its processes do. (Niceness alone does not hold: a command that
    runs `setsid` gets a new autogroup of nice 0 and twice the CPU; inside a cpu cgroup autogroups do not apply,
    and a sandboxed process cannot leave its cgroup.) v1 keeps the cpu controller in a hierarchy of its own: a
    second directory of the same name there."""

    def __init__(self, support: CgroupSupport, limit_bytes: int, nice: int = 0) -> None:
        assert support.parent is not None
        self.version = support.version
        name = f"{CGROUP_PREFIX}{os.getpid()}-{next(_NAMES)}"
        self.path = support.parent / name
        self.cpu_path: Path | None = None
        self.path.mkdir()
        try:
            if self.version == 2 and (self.path / "memory.swap.max").exists():
                (self.path / "memory.swap.max").write_text("0")
            self.set_limit(limit_bytes)
            if support.cpu_parent is not None:
                self.cpu_path = support.cpu_parent / name
                if self.cpu_path != self.path:
                    self.cpu_path.mkdir()
                file, value = cpu_weight(self.version, nice)
                (self.cpu_path / file).write_text(value)
        except OSError:
            self.close()
            raise

    @property
    def dirs(self) -> list[Path]:
        """The cgroup's directories: the memory one, and the v1 cpu one."""
        return [self.path] + ([self.cpu_path] if self.cpu_path is not None and self.cpu_path != self.path else [])

    def set_limit(self, limit_bytes: int) -> None:
        """Set the memory limit (v1: memory+swap alike, written in the order the kernel accepts: the memsw limit
        may never be below the memory limit)."""
        if self.version == 2:
            (self.path / "memory.max").write_text(str(limit_bytes))
            return
        files = [self.path / "memory.limit_in_bytes"]
        if (self.path / "memory.memsw.limit_in_bytes").exists():
            files.append(self.path / "memory.memsw.limit_in_bytes")
        try:
            for f in files:  # lowering: memory first
                f.write_text(str(limit_bytes))
        except OSError:
            for f in reversed(files):  # raising: memory+swap first
                f.write_text(str(limit_bytes))

    def usage(self) -> int:
        """Bytes charged to the cgroup now (processes, page cache, kernel memory)."""
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        try:
            return int((self.path / name).read_text())
        except (OSError, ValueError):
            return 0

    @property
    def procs(self) -> list[str]:
        """The cgroup.procs files the call's first process writes itself into."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def oom_killed(self) -> bool:
        """Did the kernel kill a process of this call for passing the memory limit?"""
        return self.oom_kills() > 0

    def oom_kills(self) -> int:
        """How many processes the kernel has killed in this cgroup for passing its memory limit (a long-lived
        sandbox compares the count before and after each call)."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in (self.path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def close(self, wait_s: float = 3.0) -> None:
        """Kill whatever is left in the cgroup and remove it (retried while the kernel reaps the processes)."""
        end = time.monotonic() + wait_s
        for d in reversed(self.dirs):  # the cpu one first: the memory one's processes are the same
            self._kill_and_remove(d, end)

    @staticmethod
    def _kill_and_remove(path: Path, end: float) -> None:
        while True:
            try:
                pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
            except OSError:
                pids = []
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            try:
                path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if time.monotonic() > end:
                    log.warning("could not remove the sandbox cgroup %s: %s", path, e.strerror)
                    return
                time.sleep(0.02)


@dataclass(frozen=True)
class HostBounds:
    cgroup: CgroupSupport
    isolated: bool  # root: private mount namespace with bounded tmpfs mounts and the overlay workspace
    staging: Path | None  # host directories the private namespace mounts on (empty on the host)
    reason: str = ""  # why `isolated` is False

    def describe(self, memory_bytes: int | None = None, tmp_bytes: int | None = None, tmp_inodes: int | None = None):
        """One line: which limits bound a sandboxed call on this machine."""
        mem = f"{memory_bytes / 2**20:,.0f} MiB " if memory_bytes else ""
        tmp = f" ({tmp_bytes / 2**20:,.0f} MiB, {tmp_inodes:,} inodes)" if tmp_bytes and tmp_inodes else ""
        parts = [
            f"memory {mem}per call, /tmp and kernel memory included (cgroup v{self.cgroup.version})"
            if self.cgroup.ok
            else f"memory per process only (RLIMIT_AS), not per call: {self.cgroup.reason}",
            "CPU weight per call (cpu cgroup)"
            if self.cgroup.ok and self.cgroup.cpu_parent is not None
            else "CPU by niceness only (no cpu cgroup: a command that calls setsid leaves it)",
            f"/tmp and /dev/shm bounded in size and inodes{tmp}, no host path in /proc/self/mountinfo"
            if self.isolated
            else f"/tmp and /dev/shm bounded in size only, inodes unbounded, the workspace's host path shows in "
            f"/proc/self/mountinfo ({self.reason})",
        ]
        return "sandbox limits: " + "; ".join(parts)


@functools.cache
def host_bounds() -> HostBounds:
    """What this machine lets us bound (checked once per process; the sandbox's probe then runs a real call)."""
    cg = _detect_cgroup()
    if cg.ok and cg.parent is not None:
        _sweep_stale(cg.parent)
        if cg.cpu_parent is not None and cg.cpu_parent != cg.parent:
            _sweep_stale(cg.cpu_parent)
    if os.geteuid() != 0:
        return HostBounds(cg, False, None, "a private mount namespace needs root")
    missing = [tool for tool in ("unshare", "mount") if shutil.which(tool) is None]
    if missing:
        return HostBounds(cg, False, None, f"{' and '.join(missing)} not installed (util-linux)")
    return HostBounds(cg, True, _staging())


def _staging() -> Path:
    """Empty directories the private namespaces mount on: one shared set per uid (nothing is ever mounted on the
    host, so every process and call can use the same), checked to be ours and not writable by others; a private
    temporary set, removed at exit, when that path is taken by something else."""
    shared = Path(tempfile.gettempdir()) / f"{CGROUP_PREFIX}mounts-{os.geteuid()}"
    try:
        for d in (shared, *(shared / sub for sub in _STAGING)):
            d.mkdir(mode=0o755, exist_ok=True)
            st = os.lstat(d)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
                raise PermissionError(f"{d} is not a directory only this user can write")
        if any((shared / "empty").iterdir()):
            raise PermissionError(f"{shared / 'empty'} is not empty")
        return shared
    except OSError as e:
        log.warning("sandbox staging directory %s unusable (%s); using a private one", shared, e)
    staging = Path(tempfile.mkdtemp(prefix=CGROUP_PREFIX))
    atexit.register(shutil.rmtree, staging, True)
    for sub in _STAGING:
        (staging / sub).mkdir()
    os.chmod(staging, 0o755)
    return staging


# Runs as the caller (root), in a new mount namespace private to this call: mount the workspace as a read-only
# overlay of two lower layers given as /proc/self/fd paths (the workspace on fd 9 and an empty directory on fd 8:
# overlay needs two lowers without an upper), so mountinfo shows `lowerdir=/proc/self/fd/9:...`, no host path;
# mount /tmp and /dev/shm with size and inode caps; hand bwrap the three mounts as fds 5-7 and close the rest, so
# no descriptor of a host directory reaches the sandbox. The layers are opened by path after `unshare` (overlay
# refuses a layer whose mount belongs to another namespace, as a descriptor opened before would be).
# Arguments: staging dir, tmpfs size, tmpfs inodes, the workspace path.
ISOLATE = (
    'exec 9<"$4" 8<"$1/empty" || exit 124; '
    'mount -n -t overlay -o ro,lowerdir=/proc/self/fd/9:/proc/self/fd/8 rise-workspace "$1/ws" || exit 124; '
    'mount -n -t tmpfs -o "size=$2,nr_inodes=$3,mode=1777" rise-tmp "$1/tmp" || exit 124; '
    'mount -n -t tmpfs -o "size=$2,nr_inodes=$3,mode=1777" rise-shm "$1/shm" || exit 124; '
    'exec 5<"$1/ws" 6<"$1/tmp" 7<"$1/shm" 8<&- 9<&- || exit 124; '
    'shift 4; exec "$@"'
)
# Arguments: how many cgroup.procs files, the files, then the argv to exec. Before anything forks: children stay inside.
JOIN_CGROUP = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 124; shift; n=$((n-1)); done; exec "$@"'


def isolate_argv(host: HostBounds, ws: Path, tmp_bytes: int, tmp_inodes: int) -> list[str]:
    """The prefix that runs the rest of an argv in its own mount namespace with the mounts above."""
    args = [str(host.staging), str(tmp_bytes), str(tmp_inodes), str(ws)]
    return ["unshare", "-m", "--propagation", "private", "--", "/bin/sh", "-c", ISOLATE, "sh", *args]


def join_argv(cgroup: CallCgroup) -> list[str]:
    """The prefix that moves the call's first process into its cgroup before it execs the rest."""
    return ["/bin/sh", "-c", JOIN_CGROUP, "sh", str(len(cgroup.procs)), *cgroup.procs]
