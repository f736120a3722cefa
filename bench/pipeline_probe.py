"""What bench/pipeline_1m.py measures with, and the services it runs: a process-tree probe, a private Ray head, the
fake server, and `ray job submit` clients that can be stopped mid-way.

The probe samples every second, for each named group of process trees (the Ray head and all it spawns: raylet,
workers, job drivers, actors; the fake server apart, since it stands in for the provider): summed RSS, CPU seconds
and bytes written (Linux task I/O accounting). CPU and writes are accumulated as per-process deltas between samples,
keyed by (pid, start time), so processes that come and go (Ray workers, killed drivers) are counted while they live
and nothing from before the probe started is; what a process does in its last second before it exits is missed.
RSS sums count shared pages (the mmapped index, Ray's object store) once per process that touches them, so the
probe also reports PSS every few samples. The machine is shared with other work: every figure carries the load
average sampled over the same interval.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

# the tests' working pattern for a private Ray head (run from the repository root, `tests` is importable)
from tests.jobs.test_ray_job_submit import ray_env, stop_head
from tests.two_nodes import free_ports

GB = 1024**3
RAY = shutil.which("ray") or "ray"


class Probe:
    """Cumulative CPU / writes and current RSS per group of process trees, sampled in a thread."""

    def __init__(self, period: float = 1.0, pss_every: int = 5) -> None:
        self.period, self.pss_every = period, pss_every
        self.roots: dict[str, list[int]] = {}
        self.last: dict[tuple[int, float], tuple[float, int]] = {}
        self.samples: list[dict] = []  # {"t", "load", group: {"rss", "pss"?, "cpu", "wbytes"}}
        self.totals: dict[str, list[float]] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._t = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Probe:
        self._t.start()
        return self

    def watch(self, group: str, pid: int) -> None:
        """Count `pid` and every descendant in `group` from the next sample on (its past CPU is not counted)."""
        import psutil

        with self._lock:
            self.roots.setdefault(group, []).append(pid)
            self.totals.setdefault(group, [0.0, 0.0])
            try:  # baseline: what the process did before it was watched is not this stage's
                for p in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
                    self.last[(p.pid, p.create_time())] = _usage(p)
            except psutil.NoSuchProcess:
                pass

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            self.sample(pss=n % self.pss_every == 0)
            n += 1
            self._stop.wait(self.period)

    def sample(self, pss: bool = False) -> None:
        import psutil

        row: dict = {"t": time.monotonic(), "load": os.getloadavg()[0]}
        with self._lock:
            for group, pids in self.roots.items():
                procs = []
                for pid in pids:
                    try:
                        root = psutil.Process(pid)
                        procs += [root, *root.children(recursive=True)]
                    except psutil.NoSuchProcess:
                        pass
                rss = pss_sum = 0
                tot = self.totals[group]
                for p in procs:
                    try:
                        key = (p.pid, p.create_time())
                        cpu, wb = _usage(p)
                        rss += p.memory_info().rss
                        if pss:
                            pss_sum += p.memory_full_info().pss
                    except (psutil.NoSuchProcess, psutil.AccessDenied):
                        continue
                    prev = self.last.get(key, (0.0, 0))
                    tot[0] += max(cpu - prev[0], 0.0)
                    tot[1] += max(wb - prev[1], 0)
                    self.last[key] = (cpu, wb)
                row[group] = {"rss": rss, "cpu": tot[0], "wbytes": tot[1], "n": len(procs)}
                if pss:
                    row[group]["pss"] = pss_sum
            self.samples.append(row)

    def stop(self) -> None:
        self._stop.set()
        self._t.join()

    def window(self, t0: float, t1: float, group: str) -> dict:
        """One group's figures between monotonic times t0 and t1 (the samples nearest inside)."""
        rows = [r for r in self.samples if t0 <= r["t"] <= t1 and group in r] or [
            min(self.samples, key=lambda r: abs(r["t"] - t1))
        ]
        first = max((r for r in self.samples if r["t"] <= t0 and group in r), key=lambda r: r["t"], default=rows[0])
        last = rows[-1]
        pss = [r[group]["pss"] for r in rows if "pss" in r.get(group, {})]
        loads = [r["load"] for r in rows]
        return {
            "wall_s": round(t1 - t0, 1),
            "cpu_s": round(last[group]["cpu"] - first[group]["cpu"], 1),
            "peak_rss_gb": round(max(r[group]["rss"] for r in rows) / GB, 2),
            "peak_pss_gb": round(max(pss) / GB, 2) if pss else None,
            "written_gb": round((last[group]["wbytes"] - first[group]["wbytes"]) / GB, 2),
            "max_processes": max(r[group]["n"] for r in rows),
            "loadavg_1m": {"mean": round(sum(loads) / len(loads), 2), "max": round(max(loads), 2)},
        }


def _usage(p) -> tuple[float, int]:
    t = p.cpu_times()
    try:
        wb = p.io_counters().write_bytes
    except (AttributeError, OSError):
        wb = 0
    return t.user + t.system, wb


class RayHead:
    """A `ray start --head --block` of our own (own temp dir, ports and token), never `ray stop`: stopping it
    stops only what it started, not other engineers' Ray."""

    NAMES = ("port", "dashboard-port", "ray-client-server-port", "node-manager-port", "object-manager-port")
    NAMES += ("dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port")
    NAMES += ("metrics-export-port",)

    def __init__(self, cpus: int, object_store_gb: float, log: Path) -> None:
        self.temp_dir = tempfile.mkdtemp(prefix="rp1m", dir="/tmp")  # short: Ray's socket paths live under it
        ports = dict(zip(self.NAMES, free_ports(len(self.NAMES)), strict=True))
        self.env = ray_env(uuid.uuid4().hex)
        cmd = ["nice", "-n", "10", RAY, "start", "--head", "--block", f"--temp-dir={self.temp_dir}"]
        cmd += [f"--num-cpus={cpus}", f"--object-store-memory={int(object_store_gb * GB)}", "--disable-usage-stats"]
        cmd += ["--include-dashboard=true", "--dashboard-host=127.0.0.1"]
        cmd += [f"--{name}={port}" for name, port in ports.items()]
        self.log = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd, env=self.env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.dashboard = f"http://127.0.0.1:{ports['dashboard-port']}"
        self._wait(log)

    def _wait(self, log: Path) -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray start --head exited; see {log}")
            try:
                urllib.request.urlopen(self.dashboard + "/api/version", timeout=2)
                return
            except urllib.error.HTTPError:  # answered (401 without a token): it is up
                return
            except OSError:
                time.sleep(1)
        raise RuntimeError("the Ray dashboard (job server) did not come up in 300 s")

    def submit(self, submission_id: str, entry: list[str], log: Path, cwd: Path) -> subprocess.Popen:
        """`ray job submit` as a user types it; the client follows the job's logs into `log` until it ends."""
        cmd = [RAY, "job", "submit", "--address", self.dashboard, "--submission-id", submission_id]
        cmd += ["--working-dir", ".", "--", *entry]
        fh = open(log, "a")  # noqa: SIM115 - the child holds it; closed when the client exits
        return subprocess.Popen(cmd, cwd=cwd, env=self.env, stdout=fh, stderr=subprocess.STDOUT, text=True)

    def stop_job(self, submission_id: str) -> None:
        cmd = [RAY, "job", "stop", "--address", self.dashboard, submission_id]
        subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=300, check=True)

    def stop(self) -> None:
        stop_head(self.proc)
        self.log.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def start_fake_llm(latency_ms: int, log: Path) -> tuple[subprocess.Popen, str]:
    """`rise-batch fake-llm` at `latency_ms` on a free port, under nice; returns the process and its base URL."""
    port = free_ports(1)[0]
    cmd = ["nice", "-n", "10", "rise-batch", "fake-llm", "--port", str(port), "--latency-ms", str(latency_ms)]
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)  # noqa: SIM115
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(base + "/_stats", timeout=2)
            return proc, base
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"rise-batch fake-llm exited; see {log}") from None
            time.sleep(0.5)
    raise RuntimeError("rise-batch fake-llm did not answer in 60 s")


def tree_size(path: Path, skip: tuple[str, ...] = ()) -> tuple[float, int]:
    """(GB, files) under `path`, leaving out top-level entries named in `skip`; os.scandir, no stat of dirs twice."""
    total = n = 0
    stack = [path]
    while stack:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except FileNotFoundError:
            continue
        for e in entries:
            if d == path and e.name in skip:
                continue
            if e.is_dir(follow_symlinks=False):
                stack.append(Path(e.path))
            elif e.is_file(follow_symlinks=False):
                total += e.stat(follow_symlinks=False).st_size
                n += 1
    return round(total / GB, 3), n
