"""What the cluster tests of keys, refused keys and lost nodes share: a corpus, a background CLI run, a limiter
planted on node B (where it landed in most runs before the limiter was pinned to the driver's node), greps."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from tests.conftest import sample_rows, write_jsonl

KEY = "sk-test-7f3c9a1e5b2d4c6e8a0f1b3d5c7e9a2b"  # what the fake server requires; must appear in no output


def corpus(tmp: Path, n: int) -> Path:
    return write_jsonl(tmp / "corpus.jsonl", sample_rows(n))


def structure_args(corpus_path: Path, out: Path, base_url: str, *extra: object) -> list[object]:
    return ["structure", "--corpus", corpus_path, "--out", out, "--backend", "llm", "--base-url", base_url,
            "--workers", 2, "--shard-docs", 10, "--concurrency", 4, "--rpm", 100_000, "--tpm", 10**9, "--no-progress",
            *extra]  # fmt: skip


def start_cli(cluster, args: list[object], env: dict[str, str]) -> subprocess.Popen:
    """`rise-batch ARGS --ray-address HEAD` in the background (to kill a node under it)."""
    cmd = [sys.executable, "-m", "rise_batch.cli", *map(str, args), "--ray-address", cluster.address]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class EndedFirst(AssertionError):
    """The command ended before the condition held: for a lost-node test, node B never had work to lose."""


def wait_for(cond: Callable[[], bool], proc: subprocess.Popen | None = None, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise EndedFirst(f"the command ended first ({proc.returncode}): {out[-2000:]}\n{err[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.2)


def in_cluster(cluster, code: str, timeout: float = 300) -> str:
    """Run `code` as a driver of the cluster (a separate process: the test's own stays free of Ray)."""
    prelude = f"import ray\nray.init(address={cluster.address!r}, logging_level='error')\n"
    out = subprocess.run([sys.executable, "-c", prelude + code], env=cluster.env, capture_output=True, text=True,
                         timeout=timeout)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def plant_limiter_on_b(cluster, name: str) -> None:
    """A detached limiter actor of the job's name on node B, which a job of that name used to take as its own."""
    in_cluster(cluster, (
        "from rise_batch.llm.limiter_actor import LimiterActor, NAMESPACE\n"
        "from rise_batch.llm.ratelimit import RateLimits\n"
        f"a = LimiterActor.options(name={name!r}, namespace=NAMESPACE, lifetime='detached', max_restarts=0,\n"
        "                          resources={'node_b': 0.01}).remote(RateLimits(rpm=100000, tpm=10**9))\n"
        "ray.get(a.snapshot.remote())\n"
    ))  # fmt: skip


def remove_limiter(cluster, name: str) -> None:
    in_cluster(cluster, (
        "from rise_batch.llm.limiter_actor import NAMESPACE\n"
        f"try:\n    ray.kill(ray.get_actor({name!r}, namespace=NAMESPACE))\nexcept ValueError:\n    pass\n"
    ))  # fmt: skip


def run_losing_b(cluster, args: list[object], limiter: str, started: Callable[[], bool]) -> tuple[int, str, str]:
    """Run `rise-batch ARGS` with a limiter of the job's name planted on node B, kill B once `started()`, and let
    the command finish: (exit code, stdout, stderr). B comes back (and the planted limiter goes) whatever happens."""
    plant_limiter_on_b(cluster, limiter)
    proc = start_cli(cluster, args, cluster.env)
    try:
        wait_for(started, proc)
        assert cluster.kill_b(wait_dead=True) > 0
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster.restart_b()
        remove_limiter(cluster, limiter)
    return proc.returncode, stdout, stderr


def busy_on_b(cluster, actor: str, requests: Callable[[], int], more: int) -> Callable[[], bool]:
    """A condition for the kill: an actor `ray::<actor>` runs on node B and `more` requests were sent since it was
    first seen (an actor on B starts seconds after the head's: it must have work in flight when B goes)."""
    seen: list[int] = []

    def ready() -> bool:
        if not seen:
            for pid in cluster.b_pids():
                try:
                    if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(f"ray::{actor}".encode()):
                        seen.append(requests())
                        break
                except OSError:
                    continue
        return bool(seen) and requests() >= seen[0] + more

    return ready


def structure_run_hash(args: list[object]) -> str:
    """The run hash `rise-batch structure ARGS` pins (its limiter's name), computed as the command computes it."""
    import argparse

    from rise_batch.commands.structure import add_structure_flags, config_from_args
    from rise_batch.config import run_hash
    from rise_batch.prompts import load_prompt

    p = argparse.ArgumentParser()
    add_structure_flags(p)
    cfg = config_from_args(p.parse_args([str(a) for a in args[1:]]))
    return run_hash(cfg, load_prompt(cfg.prompt))


def grep_everywhere(value: str, texts: list[str], *dirs: Path) -> list[str]:
    """Where `value` appears: in any of `texts` (a command's outputs) or any file under `dirs`."""
    hits = [f"output {i}" for i, t in enumerate(texts) if value in t]
    for d in dirs:
        hits += [str(p) for p in d.rglob("*") if p.is_file() and value.encode() in p.read_bytes()]
    return hits


def stats_of(out: Path) -> dict:
    return json.loads((out / "stats.json").read_text())


class KeyedBucket(NamedTuple):
    root: Any  # the test's prefix on the S3 server (an ObjectPath), the sample corpus at root/corpus.jsonl.gz
    keyed: str  # its URI with the keys in it: what a driver without AWS_* variables is given
    opts: str  # the endpoint options every keyed URI ends with
    env: dict[str, str]  # the cluster's driver environment without AWS_*, with a key and a world-readable cache


def keyed_bucket(s3: Any, two_nodes: Any, cache: str) -> KeyedBucket:
    """The S3 server as a cluster driver that holds no storage credentials sees it: keys only in the URIs (they
    reach the actors on both nodes with their configs, in memory)."""
    from rise_batch.storage import location
    from tests.agent.helpers import run_dir
    from tests.conftest import SAMPLE

    root = location(s3.uri())
    (root / "corpus.jsonl.gz").write_bytes(SAMPLE.read_bytes())
    auth = f"{s3.env['AWS_ACCESS_KEY_ID']}:{s3.env['AWS_SECRET_ACCESS_KEY']}"
    opts = f"?endpoint_override={s3.endpoint.removeprefix('http://')}&scheme=http"
    keyed = str(root).replace("s3://", f"s3://{auth}@")
    env = {k: v for k, v in two_nodes.env.items() if not k.startswith("AWS_")} | {"OPENAI_API_KEY": "x"}
    env["RISE_BATCH_CACHE"] = str(run_dir(cache))
    return KeyedBucket(root, keyed, opts, env)
