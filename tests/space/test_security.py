"""Escape attempts through `bash` and `read`: each must fail, and no corpus file may change.

The workspace holds hardlinks to the corpus (same inodes), so a single successful write would corrupt the corpus;
the fingerprint check after every attempt is the point of this table. These run real bubblewrap; they are skipped
(with the reason) only where bwrap cannot create its sandbox.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from rise_batch.space.docstore import DocStore
from rise_batch.space.sandbox import RunResult
from rise_batch.space.tools import RiseTools
from rise_batch.space.workspace import Workspace
from tests.space.conftest import TEST_LIMITS, corpus_fingerprint

TOKEN = f"rise{uuid.uuid4().hex[:12]}"


def _no(*markers: str) -> Callable[[RunResult], bool]:
    return lambda r: not any(m in r.output for m in markers)


def _alive_with_token() -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if TOKEN.encode() in (d / "cmdline").read_bytes():
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


def _gone_eventually() -> bool:
    """SIGKILL delivery is asynchronous: poll (bounded) until the sandbox's processes are reaped."""
    import time

    end = time.monotonic() + 10
    while time.monotonic() < end:
        if not _alive_with_token():
            return True
        time.sleep(0.05)
    return False


# (name, command with {f} = a hardlinked corpus file and {port} = a host TCP listener, check that it failed)
BASH_ATTEMPTS: list[tuple[str, str, Callable[[RunResult], bool]]] = [
    ("append to hardlinked file", "echo PWNED >> {f} && echo WROTE", _no("WROTE")),
    ("overwrite hardlinked file", "echo PWNED > {f} && echo WROTE", _no("WROTE")),
    ("truncate hardlinked file", "truncate -s 0 {f} && echo WROTE", _no("WROTE")),
    ("dd into hardlinked file", "dd if=/dev/zero of={f} bs=1 count=1 conv=notrunc && echo WROTE", _no("WROTE")),
    ("python r+ write", "python3 -c \"open('{f}','r+').write('X'); print('WROTE')\"", _no("WROTE")),
    ("write via /proc/self/fd", "exec 3<{f}; echo X > /proc/self/fd/3 && echo WROTE", _no("WROTE")),
    (
        "chmod/chown/touch",
        "chmod 666 {f} && echo CHANGED; chown 0:0 {f} && echo CHANGED; touch {f} && echo CHANGED",
        _no("CHANGED"),
    ),
    ("rm and mv", "rm -f {f} && echo GONE; mv {f} moved.txt && echo GONE", _no("GONE")),
    ("create symlinks", "ln -s / escape && echo LINKED; ln -s /etc {f}.lnk && echo LINKED", _no("LINKED")),
    ("hardlink into /tmp then write", "ln {f} /tmp/hl && echo LINKED && echo X >> /tmp/hl", _no("LINKED")),
    (
        "write outside /tmp",
        "for p in /x /usr/x /etc/x /workspace/x ./new.txt /proc/x /dev/x /dev/null/x; do "
        "(echo X > $p) 2>/dev/null && echo WROTE $p; done; mkdir /newdir && echo WROTE",
        _no("WROTE"),
    ),
    ("read /etc/shadow and passwd", "cat /etc/shadow /etc/passwd", lambda r: "root:" not in r.output),
    (
        "host home",
        "ls -a /root /home; cat /root/.bashrc /root/.profile",
        lambda r: r.output.count("No such file or directory") >= 4,
    ),
    (
        "/proc/1/root",
        "ls /proc/1/root/; cat /proc/1/root/etc/shadow",
        lambda r: "work" not in r.output.split() and "home" not in r.output.split() and "root:" not in r.output,
    ),
    (
        "/proc/self root and cwd",
        "ls /proc/self/root/work /proc/self/cwd/../../home /proc/self/root/root",
        lambda r: r.output.count("No such file or directory") == 3,
    ),
    (
        "block devices and /sys",
        "head -c 16 /dev/vda /dev/sda /dev/mem /dev/kmem; ls /sys/class/net",
        lambda r: r.output.count("No such file or directory") == 5,
    ),
    ("host environment (API keys)", "env; cat /proc/*/environ | tr '\\0' '\\n'", _no(TOKEN)),
    ("network: curl to host", "curl -sS -m 1 http://127.0.0.1:{port}/ && echo CONNECTED", _no("CONNECTED")),
    (
        "network: python socket",
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=1); print('CONNECTED')\"",
        _no("CONNECTED"),
    ),
    ("network: /dev/tcp", "echo hi > /dev/tcp/127.0.0.1/{port} && echo CONNECTED", _no("CONNECTED")),
    (
        "network: outside",
        "curl -sS -m 1 http://1.1.1.1/ && echo CONNECTED; getent hosts example.com && echo RESOLVED",
        _no("CONNECTED", "RESOLVED"),
    ),
    (
        "mount and namespaces",
        "mount -t tmpfs none /tmp && echo MOUNTED; mount --bind /tmp /workspace && echo MOUNTED; "
        "mount -o remount,rw /workspace && echo MOUNTED; unshare -Urm true && echo UNSHARED",
        _no("MOUNTED", "UNSHARED"),
    ),
    ("kill everything", "kill -9 -1; kill -9 1; kill -9 $PPID; echo STILL-HERE", lambda r: True),
    ("fork bomb", ": " + TOKEN + "; b(){{ b|b& }}; b; wait", lambda r: True),
    ("memory bomb", "python3 -c \"b = bytearray(2 * 1024**3); print('ALLOCATED')\"", _no("ALLOCATED")),
    ("fill /tmp one file", "head -c 2M /dev/zero > /tmp/big && echo WROTE", _no("WROTE")),
    (
        "fill /tmp many files",
        "for i in 1 2 3 4 5 6 7 8; do head -c 900K /dev/zero > /tmp/f$i || echo FULL; done",
        lambda r: "FULL" in r.output,
    ),
    (
        "sleep past the cap with children",
        f"(setsid bash -c 'sleep 1000' {TOKEN}-a &); bash -c 'sleep 1000' {TOKEN}-b & sleep 1000",
        lambda r: r.timed_out,
    ),
    ("runaway output", "yes", lambda r: r.timed_out and len(r.output) == TEST_LIMITS.max_output_chars),
    (
        "runaway output, finite",
        "yes | head -c 50000000",
        lambda r: r.exit_code == 0 and len(r.output) == 4000 and r.cut_chars == 50_000_000 + 12 - 4000,
    ),
]


@pytest.fixture
def rise(docs, ws_root, bwrap_ok):
    root, relpaths = docs
    ws = Workspace(ws_root / "ws", DocStore(root))
    ws.add(list(relpaths))
    yield RiseTools(None, ws, limits=TEST_LIMITS), root, next(iter(relpaths.values()))  # type: ignore[arg-type]
    ws.close()


@pytest.fixture(scope="module")
def host_port():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    port = srv.getsockname()[1]
    socket.create_connection(("127.0.0.1", port), timeout=2).close()  # reachable from the host: the test means it
    yield port
    srv.close()


@pytest.mark.parametrize("name,command,failed", BASH_ATTEMPTS, ids=[a[0] for a in BASH_ATTEMPTS])
def test_bash_escape_attempt_fails(rise, host_port, monkeypatch, name, command, failed):
    tools, docs_root, rel = rise
    monkeypatch.setenv("RISE_CANARY_SECRET", TOKEN)
    canary = subprocess.Popen(["sleep", "60"])  # a host process that `kill -9 -1` must not reach
    try:
        before = corpus_fingerprint(docs_root)
        res = tools.sandbox.run("echo SANDBOX-RAN; " + command.format(f=shlex.quote(rel), port=host_port))
        assert res.sandboxed and "SANDBOX-RAN" in res.output, res.render()  # the attempt really ran inside
        assert failed(res), f"{name}: escape attempt did not fail:\n{res.render()}"
        assert corpus_fingerprint(docs_root) == before, f"{name}: a corpus file changed"
        assert (tools.ws.files_dir / rel).exists()
        assert canary.poll() is None, "a host process was killed from inside the sandbox"
        assert _gone_eventually(), f"{name}: sandbox processes outlived the call: {_alive_with_token()}"
    finally:
        canary.kill()
        canary.wait()


def test_tmp_is_private_per_call(rise):
    tools, _, _ = rise
    assert tools.sandbox.run("echo secret > /tmp/note && cat /tmp/note").output.strip() == "secret"
    assert "No such file" in tools.sandbox.run("cat /tmp/note").output


READ_ATTEMPTS = [
    ("/etc/passwd", "absolute paths are not allowed"),
    ("/proc/self/environ", "absolute paths are not allowed"),
    ("../../../etc/passwd", "'..' is not allowed"),
    ("en.wikipedia.org/../../../../etc/passwd", "'..' is not allowed"),
    ("~/.bashrc", "absolute paths are not allowed"),
    ("escape.txt", "is a symbolic link; only regular files can be read"),
    ("escdir/etc/passwd", "is reached through a symbolic link"),
    ("", "needs a file path"),
    (".", "is the workspace directory itself"),
    ("en.wikipedia.org", "is a directory"),
    ("bad\x00name", "NUL"),
    ("no/such/file.txt", "no such file"),
]


@pytest.mark.parametrize("path,message", READ_ATTEMPTS, ids=[repr(p) for p, _ in READ_ATTEMPTS])
def test_read_escape_attempt_fails(rise, path, message):
    tools, docs_root, _ = rise
    # A corpus could ship symlinks; the agent cannot create them (read-only), so plant them from the host.
    for name, target in (("escape.txt", "/etc/passwd"), ("escdir", "/")):
        link = tools.ws.files_dir / name
        if not link.is_symlink():
            os.symlink(target, link)
    before = corpus_fingerprint(docs_root)
    res = tools.read(path)
    assert res.error and message in res.text, res.text
    assert "root:" not in res.text
    assert corpus_fingerprint(docs_root) == before


def test_read_absolute_workspace_path_gets_a_hint(rise):
    tools, _, rel = rise
    res = tools.read(f"/workspace/{rel}")
    assert res.error and f"Use '{rel}' instead" in res.text
