"""The supervisor of a long-lived sandbox: runs inside bubblewrap and starts each command in its own namespaces.

Self-contained (standard library only, Python >= 3.9): session.py sends this file's text over the control socket
to the sandbox's own `python3 -I -S -c BOOT`, which runs it as `__main__`, so nothing of the host's Python or paths
is needed or visible inside, and importing this module on the host does nothing.

Why it exists: starting bubblewrap, its mount namespace and a memory cgroup for every call costs tens of ms (more
on a busy machine); started once per workspace, a call costs three forks and one exec. What a call got from its
own bwrap it still gets here, per call: for every command the supervisor forks a helper that unshares a mount, IPC
and PID namespace and forks the call's init (pid 1 of the new PID namespace). The init mounts a fresh /proc (it
shows only this call's processes) and fresh size- and inode-capped tmpfs mounts on /tmp and /dev/shm (state does
not survive the call), then forks the command: its own process group in the sandbox's session (the session is
niced as a scheduling group and the command below the supervisor, so agents' commands yield the CPU to the
harness), oom_score_adj 1000, the same hard rlimits as the one-shot sandbox, /proc remounted read-only (so the
command cannot write the session's autogroup niceness, which every later call would inherit), every capability
dropped (bounding, ambient, effective, permitted, inheritable) and no_new_privs, stdin /dev/null, stdout and
stderr the host's pipe, no other descriptor, then `exec /bin/bash -c`. The call's helper and init write anything
they print to the call's pipe too (the sandbox's own stderr is read only when it ends), and the init has no Python
signal handler, so the kernel drops what a command sends it.
When the command exits, the init exits with its status (128 + signal when killed) and the kernel kills whatever
is left in the PID namespace; killing the init (the time cap) does the same. The supervisor lives in the outer
PID namespace, which no command can see or signal, and keeps its capabilities, so no command can ptrace it or
its per-call init.

Protocol on the SOCK_SEQPACKET control socket (fd in argv[1]): the host sends one JSON request with the write end
of the call's output pipe attached (SCM_RIGHTS); the supervisor answers {"started": true}, then {"exit": code}
when the call's init is reaped. {"kill": true} kills the running call. No request for argv[2] seconds: it exits.
"""

import ctypes
import json
import os
import resource
import select
import signal
import socket
import sys
import time

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID = 0x00020000, 0x08000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1,
    2,
    4,
    8,
    32,
    4096,
    0x4000,
    1 << 18,
)
PR_SET_CHILD_SUBREAPER, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 36, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SETUP_FAILED = 124  # the exit code of a call whose namespaces or mounts could not be made (as the host's prefix)
LIMITS_FAILED = 125  # the exit code of a call whose rlimits could not be set (as the one-shot sandbox's prologue)


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(libc, source: str, target: str, fstype: str, flags: int, data: str = "") -> None:
    _check(libc.mount(source.encode(), target.encode(), fstype.encode(), flags, data.encode() or None), target)


def drop_capabilities(libc) -> None:
    """Ambient and bounding sets cleared, then effective/permitted/inheritable zeroed, then no_new_privs."""
    _check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # EINVAL past the kernel's last capability
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    _check(libc.capset(header, (ctypes.c_uint32 * 6)()), "capset")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _fail(out_fd: int, code: int, message: str) -> None:
    try:
        os.write(out_fd, f"sandbox: {message}\n".encode())
    finally:
        os._exit(code)


def nice_session_group(nice: int) -> None:
    """Nice this sandbox's session as a scheduling group (its autogroup), once per sandbox: with autogroup scheduling
    (the kernel's default on desktops and many servers) a process's niceness only weighs against its own session,
    so the sandbox's session as a whole must yield to the trajectory actors. Raising it needs no privilege, but an
    unprivileged process may change an autogroup only once per 100 ms machine-wide: a few retries, then leave it
    (the commands' own niceness still holds where autogroups do not apply, e.g. inside a cpu cgroup)."""
    for attempt in range(4):
        try:
            with open("/proc/self/autogroup", "w") as f:
                f.write(str(nice))
            return
        except FileNotFoundError:
            return  # a kernel without autogroup
        except OSError:  # EAGAIN: another process changed an autogroup in the last 100 ms
            if attempt < 3:
                time.sleep(0.1)


def _exec_command(libc, req: dict, out_fd: int) -> None:
    """The command's process: its own process group, niceness, rlimits, no capabilities, only fds 0-2, then bash -c."""
    try:
        os.setpgid(0, 0)  # its own process group, in the sandbox's session: a session per call would be its own
        # autogroup, as heavy for the scheduler as a whole trajectory actor (see nice_session_group)
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")  # the memory cgroup's OOM killer takes the command, never the supervisor
        for name, value in req["rlimits"].items():
            resource.setrlimit(getattr(resource, name), (value, value))
        os.nice(req.get("nice", 0))  # below the supervisor, within the sandbox's niced session
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # as a one-shot call gets them (Python ignores SIGXFSZ)
            signal.signal(sig, signal.SIG_DFL)
        # /proc read-only from here: the command cannot write the session's autogroup (the sandbox's niceness, which
        # would hold for every later call) or anything else of its processes there
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
        _check(libc.mount(None, b"/proc", None, flags, None), "make /proc read-only")
        drop_capabilities(libc)
    except (OSError, ValueError) as e:
        _fail(out_fd, LIMITS_FAILED, f"cannot set the call's limits: {e}")
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    os.chdir(req["cwd"])
    try:
        os.execve("/bin/bash", ["/bin/bash", "-c", req["command"]], req["env"])
    except OSError as e:
        os.write(2, f"sandbox: cannot run /bin/bash: {e}\n".encode())
    os._exit(127)


def _call_init(libc, req: dict, out_fd: int) -> None:
    """pid 1 of the call's PID namespace: fresh /proc, /tmp and /dev/shm, then the command; reaps until it ends."""
    try:
        _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make mounts private")
        _mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        opts = f"size={req['tmp_bytes']},nr_inodes={req['tmp_inodes']},mode=1777"
        _mount(libc, "rise-tmp", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts)
        _mount(libc, "rise-shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, opts)
        child = os.fork()
    except OSError as e:
        _fail(out_fd, SETUP_FAILED, f"cannot set up the call: {e}")
    if child == 0:
        _exec_command(libc, req, out_fd)
    os.close(out_fd)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(SETUP_FAILED)
        if pid == child:
            os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def _start_call(libc, sock: socket.socket, req: dict, out_fd: int) -> int:
    """Fork the helper that unshares the call's namespaces and forks its init; return the init's pid (ours to
    reap: the supervisor is a child subreaper, and the helper exits at once)."""
    ready_r, ready_w = os.pipe()
    helper = os.fork()
    if helper == 0:
        sock.close()
        os.close(ready_r)
        # Whatever the helper and the call's init print goes to the call's own output, which the host reads, never to
        # the sandbox's stderr, which nobody reads while it runs (once full, it would block every later call). The
        # init, pid 1 of the call's PID namespace, keeps no Python handler: the kernel then drops any signal a
        # command sends it (`kill -INT 1` raised KeyboardInterrupt and printed a traceback).
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        try:
            _check(libc.unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID), "unshare")
            init = os.fork()
        except OSError as e:
            _fail(out_fd, SETUP_FAILED, f"cannot set up the call: {e}")
        if init == 0:
            os.close(ready_w)
            _call_init(libc, req, out_fd)
        os.write(ready_w, str(init).encode())
        os._exit(0)
    os.close(ready_w)
    os.close(out_fd)
    data = os.read(ready_r, 32)
    os.close(ready_r)
    os.waitpid(helper, 0)
    return int(data) if data else -1


def serve(sock: socket.socket, idle_s: float) -> None:
    libc = _libc()
    _check(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "subreaper")
    sock.send(json.dumps({"hello": os.getpid()}).encode())
    group_nice = 0
    while True:
        if not select.select([sock], [], [], idle_s)[0]:
            return  # idle: the host starts a new sandbox for its next call
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 1)
        if not msg:
            return  # the host closed the session
        req = json.loads(msg)
        if not fds:
            continue  # a kill for a call that already ended
        if req.get("nice", 0) != group_nice:  # the first call (limits are per sandbox in practice): once
            group_nice = req.get("nice", 0)
            nice_session_group(group_nice)
        init = _start_call(libc, sock, req, fds[0])
        sock.send(json.dumps({"started": init > 0}).encode())
        pidfd = os.pidfd_open(init) if init > 0 else -1
        while init > 0:
            ready = select.select([sock, pidfd], [], [])[0]
            if sock in ready:
                msg = sock.recv(1 << 20)
                if not msg:
                    os.kill(init, signal.SIGKILL)
                    return
                if json.loads(msg).get("kill"):
                    os.kill(init, signal.SIGKILL)
            if pidfd in ready:
                break
        code = SETUP_FAILED
        if init > 0:
            os.close(pidfd)
            code = os.waitstatus_to_exitcode(os.waitpid(init, 0)[1])
            code = 128 - code if code < 0 else code  # killed by a signal: 128 + signal, as bwrap reports it
        while True:  # reap the helpers' other orphans, if any
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        sock.send(json.dumps({"exit": code}).encode())


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    serve(socket.socket(fileno=int(sys.argv[1])), float(sys.argv[2]))
