"""One long-lived sandbox per workspace: bubblewrap, its mounts and its memory cgroup set up once, calls run inside.

A one-shot call pays for a cgroup, a private mount namespace with three mounts, bwrap's own namespaces and seven
execs; on a busy machine every one of those processes waits for a core, so a `true` took ~100 ms. A session starts
that chain once, with supervisor.py as the sandbox's program, and then each call costs three forks and one exec
inside it, with the per-call isolation described there (own PID, mount and IPC namespaces, fresh /proc, /tmp and
/dev/shm, no capabilities, the same rlimits). What is per workspace instead of per call:

- the memory cgroup: calls run one at a time (a lock), so its limit still bounds one call as a whole; it is set to
  the call's `memory_bytes` plus what the idle supervisor holds, measured when it starts (a few MB), and its OOM
  kills are counted per call;
- the network and UTS namespaces (no network either way; nothing a command leaves there outlives its processes,
  which die with the call's PID namespace);
- the outer mounts (read-only system directories and the workspace), which no command can change.

A session that dies (its supervisor killed, idle for IDLE_EXIT_S, or this process forked) is started again on the
next call; a call is retried on a new session only if it had not started.

Closing a session waits for its bwrap to exit (up to 2 s, then kills it) and removes its cgroup. A sandbox dropped
without `close()` is closed by `close_later`, in a reaper thread of its own: the garbage collector runs finalizers in
whichever thread's allocation started a collection, and a trajectory actor's collections start in a search's link
loop or on the event loop, which then waited seconds for someone else's bwrap (the in-actor search tail at load).
"""

from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import queue
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rise_batch.space import bounds
from rise_batch.space.output import collect

log = logging.getLogger(__name__)

IDLE_EXIT_S = 60.0  # an idle supervisor exits (a dropped Sandbox lingers at most this long); restarted on demand
START_TIMEOUT_S = 20.0
KILL_ACK_S = 5.0  # after a kill, how long the supervisor has to report the call's end before the session is killed
SUPERVISOR_SOURCE = Path(__file__).with_name("supervisor.py")
# The supervisor's command line, as every call sees it in /proc/1/cmdline: it reads its source from the socket.
BOOT = (
    "import json,socket,sys;s=socket.socket(fileno=int(sys.argv[1]));m=s.recv(1<<20);s.detach();"
    "exec(json.loads(m)['source'])"
)


class SessionUnavailable(RuntimeError):
    """The long-lived sandbox could not start here (the message says why); the caller runs one-shot calls."""


class _Call:
    """What output.collect needs of a process (stdout, wait, returncode), for a command run by the supervisor."""

    def __init__(self, session: Session, out) -> None:
        self.session, self.stdout, self.returncode = session, out, None

    def wait(self, timeout: float | None = None) -> int:
        msg = self.session.receive(timeout)
        if msg is None:
            raise subprocess.TimeoutExpired("sandbox call", timeout or 0)
        self.returncode = msg.get("exit", 137)  # no message: the supervisor died, so did the call
        return self.returncode

    def kill(self) -> None:
        """The time cap: the supervisor kills the call's PID namespace; if it does not answer, the whole session."""
        self.session.send({"kill": True})
        try:
            self.wait(KILL_ACK_S)
        except subprocess.TimeoutExpired:
            log.warning("the sandbox supervisor did not confirm a kill within %g s; killing its sandbox", KILL_ACK_S)
            self.session.close()
            self.returncode = None


class Session:
    """A started long-lived sandbox: the Popen of its bwrap chain, its control socket and its cgroup."""

    def __init__(
        self,
        launch: Callable[[list[str]], list[str]],
        cgroup_support: bounds.CgroupSupport | None,
        memory_bytes: int,
        env: dict[str, str],
        pass_fds: tuple[int, ...] = (),
        check: dict | None = None,
        nice: int = 0,
    ) -> None:
        """`launch(program)` is the argv (isolation prefixes, setpriv, bwrap) that runs `program` in the sandbox,
        with `pass_fds` open; the cgroup, if any, is joined before it. `check`, a request that must exit 0, is
        run once before the session is used. `nice` gives the cgroup the CPU weight of that niceness."""
        start_reaper()
        self.lock = threading.Lock()
        self.last_words = ""
        self.pid = os.getpid()
        self.cgroup = bounds.CallCgroup(cgroup_support, memory_bytes, nice) if cgroup_support else None
        self.memory_bytes = memory_bytes
        ours, pair = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Above 9: the isolation prefix (bounds.ISOLATE) uses fds 5-9 for the mounts it hands to bwrap.
        theirs = socket.socket(fileno=fcntl.fcntl(pair.fileno(), fcntl.F_DUPFD_CLOEXEC, 10))
        pair.close()
        self.sock: socket.socket | None = ours
        try:
            program = ["python3", "-I", "-S", "-c", BOOT, str(theirs.fileno()), f"{IDLE_EXIT_S:g}"]
            argv = launch(program)
            if self.cgroup is not None:
                argv = bounds.join_argv(self.cgroup) + argv
            self.proc = subprocess.Popen(
                argv,
                cwd="/",
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(theirs.fileno(), *pass_fds),
                start_new_session=True,
            )
        except BaseException:
            self.close()
            raise
        finally:
            theirs.close()
        self.send({"source": SUPERVISOR_SOURCE.read_text()})
        hello = self.receive(START_TIMEOUT_S)
        if not hello or "hello" not in hello:
            self.close()
            raise SessionUnavailable(f"the sandbox supervisor did not start ({self.last_words or 'no answer'})")
        self.baseline = self.cgroup.usage() if self.cgroup else 0  # the idle supervisor: not the call's to use
        self._limit(memory_bytes)
        if check is not None:  # a call that cannot set itself up here must not be an agent's first result
            done = self.run(check, memory_bytes, time.monotonic() + START_TIMEOUT_S, 2000)
            if done is None or done[3] != 0:
                self.close()
                raise SessionUnavailable(f"a call in it failed: {done[0].strip() if done else self.last_words}")

    @property
    def alive(self) -> bool:
        return self.sock is not None and self.pid == os.getpid() and self.proc.poll() is None

    def _limit(self, memory_bytes: int) -> None:
        if self.cgroup is not None:
            self.cgroup.set_limit(memory_bytes + self.baseline)
            self.memory_bytes = memory_bytes

    def send(self, msg: dict, fds: tuple[int, ...] = ()) -> bool:
        if self.sock is None:
            return False
        try:
            socket.send_fds(self.sock, [json.dumps(msg).encode()], list(fds))
            return True
        except OSError:
            return False

    def receive(self, timeout: float | None) -> dict | None:
        """The supervisor's next message; {} when it is gone; None at the timeout."""
        if self.sock is None:
            return {}
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 16)
        except TimeoutError:
            return None
        except OSError:
            data = b""
        return json.loads(data) if data else {}

    def start_call(self, request: dict, memory_bytes: int) -> tuple[_Call, int] | None:
        """Send one call; its output pipe's read end and the OOM count before it, or None if no call started."""
        if memory_bytes != self.memory_bytes:
            self._limit(memory_bytes)
        oom_before = self.cgroup.oom_kills() if self.cgroup else 0
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            sent = self.send(request, (w,))
        finally:
            os.close(w)
        started = self.receive(START_TIMEOUT_S) if sent else {}
        if not started or not started.get("started", True):
            os.close(r)
            self.close()
            return None
        return _Call(self, os.fdopen(r, "rb", buffering=0)), oom_before

    def run(self, request: dict, memory_bytes: int, deadline: float, max_chars: int):
        """(output, cut chars, timed out, exit code, memory exceeded, monotonic time the call had started inside
        the sandbox), or None when the call could not start. The start time splits the sandbox's overhead from
        the command's own time."""
        with self.lock:
            begun = self.start_call(request, memory_bytes)
            if begun is None:
                return None
            started = time.monotonic()
            call, oom_before = begun
            head, cut, timed_out = collect(call, deadline, max_chars, kill=call.kill)  # type: ignore[arg-type]
            oom = self.cgroup is not None and self.cgroup.oom_kills() > oom_before
            return head, cut, timed_out, None if timed_out else call.returncode, oom, started

    def close(self) -> None:
        """End the session: its supervisor sees the socket close and kills any call; then bwrap and the cgroup go."""
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()
        proc = getattr(self, "proc", None)
        if proc is not None and self.pid == os.getpid():
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, 9)
                except OSError:
                    pass
                proc.wait()
            if proc.stdout is not None and not proc.stdout.closed:  # bwrap's or python3's errors, if any
                self.last_words = proc.stdout.read(2000).decode(errors="replace").strip()
                proc.stdout.close()
        if self.cgroup is not None and self.pid == os.getpid():
            self.cgroup.close()
            self.cgroup = None


_dropped: queue.SimpleQueue[Session] = queue.SimpleQueue()
_reaper: threading.Thread | None = None
_reaping = threading.Lock()  # held while the reaper closes one: exit waits for it


def close_later(session: Session) -> None:
    """A dropped sandbox's finalizer: its session is closed in the reaper thread, so the thread the garbage
    collector happened to run in (a tool call, the event loop) never waits for a bwrap to exit."""
    _dropped.put(session)
    start_reaper()


def start_reaper() -> None:
    """The reaper thread, started once per process (a forked child starts its own) when its first session starts,
    so that a finalizer does not wait for a thread to start either."""
    global _reaper
    if _reaper is None or not _reaper.is_alive():
        _reaper = threading.Thread(target=_reap, name="sandbox-reaper", daemon=True)
        try:
            _reaper.start()
        except RuntimeError:  # at interpreter shutdown: _close_dropped closes what is queued
            pass


def _reap() -> None:
    while True:
        session = _dropped.get()
        with _reaping:
            _close_quietly(session)


def _close_quietly(session: Session) -> None:
    try:
        session.close()
    except Exception:  # a reaper that died would leave every later dropped sandbox running until its idle exit
        log.exception("closing a dropped sandbox failed")


@atexit.register
def _close_dropped() -> None:
    """At exit, what the reaper has not closed yet is closed here (a daemon thread does not outlive the process),
    after the one it may be closing."""
    with _reaping:
        while True:
            try:
                _close_quietly(_dropped.get_nowait())
            except queue.Empty:
                break
