"""A real 2-node Ray cluster on one machine, for the tests of what goes wrong beyond one machine.

The head is a `ray start --head --block`; node B is a second `ray start --address … --block` started inside its own
private mount namespace (`unshare -m --propagation private`), where a directory of the host is bind-mounted over
`local`: a path under `cluster.local` names one directory on the head and another one on node B, as a node-local
disk does on a real cluster. Everything else (the checkout, /tmp, the corpus) both nodes see alike, as a shared
filesystem. Each node has its own temp dir, ports and resources (`node_head` / `node_b`, one each, so a test can
pin work to a node); both use token auth with one token, as `ray up` sets it.

Node B is killed as a lost node is: SIGKILL to every process in its mount namespace (raylet, workers, actors),
nothing told beforehand. `restart_b()` brings a fresh node B back for the next test. Never `ray stop`: that would
stop every Ray on the machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

RAY = shutil.which("ray")
UNSHARE = shutil.which("unshare")
PORT_NAMES = ["node-manager-port", "object-manager-port", "metrics-export-port", "runtime-env-agent-port"]
PORT_NAMES += ["dashboard-agent-listen-port", "dashboard-agent-grpc-port"]


def free_ports(n: int) -> list[int]:
    """n ports free on loopback now (each Ray process of a test cluster needs its own)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def can_run() -> str | None:
    """Why this machine cannot start the cluster, or None (root is needed for a private mount namespace)."""
    if RAY is None:
        return "the `ray` CLI is not installed"
    if UNSHARE is None or os.geteuid() != 0:
        return "a private mount namespace needs unshare and root"
    return None


class TwoNodes:
    """The running cluster: `address` (GCS), `env` (token auth) for a driver, `local` (differs per node)."""

    def __init__(self, cpus: int = 2) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="r2n", dir="/tmp"))  # short: Ray's socket paths live under it
        self.cpus = cpus
        self.local = self.root / "local"  # the head's node-local disk; node B sees root/b_disk here
        self.b_disk = self.root / "b_disk"
        self.local.mkdir()
        self.b_disk.mkdir()
        token = uuid.uuid4().hex
        self.env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")}
        self.env |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "RAY_USAGE_STATS_ENABLED": "0"}
        self.env["RAY_TMPDIR"] = str(self.root)  # ray.init() without an address never finds another cluster
        # the head notices a lost node within seconds (Ray's default is about half a minute)
        self.env |= {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3"}
        gcs_port, dash_port, client_port = free_ports(3)
        self.address = f"127.0.0.1:{gcs_port}"
        self.dashboard = f"http://127.0.0.1:{dash_port}"
        head = [RAY, "start", "--head", "--block", f"--port={gcs_port}", f"--temp-dir={self.root}/head"]
        head += ["--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash_port}"]
        head += [f"--ray-client-server-port={client_port}", '--resources={"node_head": 1}']
        self.b: subprocess.Popen | None = None
        self.b_ns: str | None = None
        self.head = self._start(head, "head")
        try:
            self._wait_nodes("node_head", self.head)
            self.restart_b()
        except BaseException:  # the fixture never gets to stop() what it started: no orphan cluster is left
            self.stop()
            raise

    def _start(self, cmd: list[str], name: str, prefix: list[str] | None = None) -> subprocess.Popen:
        cmd = [*cmd, f"--num-cpus={self.cpus}", "--disable-usage-stats"]
        cmd += [f"--{n}={p}" for n, p in zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True)]
        log = open(self.root / f"{name}.log", "a")  # noqa: SIM115 - the child holds it
        proc = subprocess.Popen(
            [*(prefix or []), *cmd], env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        return proc

    def restart_b(self) -> None:
        """Start node B (again): a `ray start` joining the head, inside a mount namespace where `local` is b_disk."""
        if self.b is not None and self.b.poll() is None:
            self.kill_b()
        inner = f'mount --bind {self.b_disk} {self.local} && exec "$@"'
        prefix = [UNSHARE, "-m", "--propagation", "private", "sh", "-c", inner, "sh"]
        cmd = [RAY, "start", f"--address={self.address}", "--block", f"--temp-dir={self.root}/b"]
        cmd += ['--resources={"node_b": 1}']
        for attempt in range(3):  # a raylet gets 30 s (Ray's constant) to register: on a loaded machine it may not
            self.b = self._start(cmd, "b", prefix)
            self.b_ns = self._own_namespace(self.b)
            try:
                self._wait_nodes("node_b", self.b)
                return
            except RuntimeError:
                self.kill_b()
                if attempt == 2:
                    raise

    @staticmethod
    def _own_namespace(proc: subprocess.Popen) -> str:
        """Node B's mount namespace, once `unshare` has made it: never this process's own (kill_b kills every
        process of that namespace)."""
        mine = os.readlink("/proc/self/ns/mnt")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ns = os.readlink(f"/proc/{proc.pid}/ns/mnt")
            if ns != mine:
                return ns
            if proc.poll() is not None:
                raise RuntimeError("unshare exited before node B started")
            time.sleep(0.05)
        raise RuntimeError("node B never got its own mount namespace")

    def alive_nodes(self) -> list[str]:
        """The custom resource (node_head, node_b) of each alive node, as the GCS sees them; asked by a separate
        process, so the test's own process stays free of Ray."""
        code = (
            "import ray; ray.init(address=%r, logging_level='error')\n"
            "print('NODES', *[k for n in ray.nodes() if n['Alive'] for k in n['Resources'] if k.startswith('node_')])"
        )
        out = subprocess.run(
            [sys.executable, "-c", code % self.address], env=self.env, capture_output=True, text=True, timeout=120
        )
        lines = [line.split()[1:] for line in out.stdout.splitlines() if line.startswith("NODES")]
        return lines[-1] if lines else []

    def _wait_nodes(self, name: str, proc: subprocess.Popen | None, alive: bool = True) -> None:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"ray start exited:\n{self.logs()}")
            if (name in self.alive_nodes()) == alive:
                return
            time.sleep(1)
        raise RuntimeError(f"{name} did not become {'alive' if alive else 'dead'} in 180 s:\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(self.root.glob("*.log")))

    def b_pids(self) -> list[int]:
        """Every process of node B: those in its mount namespace."""
        assert self.b_ns != os.readlink("/proc/self/ns/mnt"), "node B shares this process's mount namespace"
        pids = []
        for p in Path("/proc").iterdir():
            if p.name.isdigit():
                try:
                    if os.readlink(p / "ns" / "mnt") == self.b_ns and int(p.name) != os.getpid():
                        pids.append(int(p.name))
                except OSError:
                    continue
        return pids

    def kill_b(self, wait_dead: bool = False) -> int:
        """Lose node B: SIGKILL every one of its processes at once; with `wait_dead`, until the head has noticed.
        Returns how many processes were killed."""
        pids = self.b_pids() if self.b_ns else []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.b is not None:
            self.b.wait(timeout=60)
        if wait_dead:
            self._wait_nodes("node_b", None, alive=False)
        return len(pids)

    def head_sees(self, relpath: str) -> Path:
        return self.local / relpath

    def b_sees(self, relpath: str) -> Path:
        return self.b_disk / relpath

    def stop(self) -> None:
        self.kill_b()
        self.head.send_signal(signal.SIGTERM)
        try:
            self.head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.head.pid, signal.SIGKILL)
            self.head.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def cli(
        self, *args: object, env: dict[str, str] | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess:
        """`rise-batch ARGS --ray-address HEAD` as a user on the head runs it (this checkout's code)."""
        cmd = [sys.executable, "-m", "rise_batch.cli", *map(str, args), "--ray-address", self.address]
        return subprocess.run(cmd, env=env or self.env, capture_output=True, text=True, timeout=timeout)
