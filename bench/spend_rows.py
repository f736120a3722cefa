"""The rows of "A cap that holds whatever fails" against a fake server that bills what it served, whatever its
replies say: the provider's bill, what the run records as spent, and the cap, for one checkout of the engine.

    python -m bench.spend_rows --docs DEMO_OUT --engine PATH_OF_A_CHECKOUT [--queries 8] [--rows 1,2,4]

DEMO_OUT is what `rise-batch demo --out DEMO_OUT` made (structured sample docs, index/ inside). The server is this
checkout's `rise-batch fake-llm` (its `--usage` faults and `bill_usd`); the engine measured is `--engine`'s (so the
code before the spend journal can be measured by the same harness). Queries are titles of the sample's articles,
answered by the fake's scripted agent in 2 to 11 tool turns. The cap is 60% of an uncapped run's bill. "recorded" is
what the engine says was spent: the spend journal where there is one (money/spent.py), else the sum of the
trajectory files (the ledger before it).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.request import urlopen

REPO = Path(__file__).resolve().parent.parent
MODEL = "gpt-5.4-mini"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """This checkout's fake server in its own process, with fault flags."""

    def __init__(self, *flags: str) -> None:
        self.port = free_port()
        env = os.environ | {"PYTHONPATH": str(REPO)}
        cmd = [sys.executable, "-m", "rise_batch.cli", "fake-llm", "--port", str(self.port), *flags]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.stats()
                return
            except OSError:
                assert time.monotonic() < deadline and self.proc.poll() is None, "the fake server did not start"
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict[str, Any]:
        with urlopen(f"{self.url}/_stats", timeout=5) as r:
            return json.loads(r.read())

    def bill(self) -> float:
        return self.stats()["bill_usd"]

    def served(self) -> int:
        return self.stats()["by_status"].get("200", 0)

    def idle(self) -> None:
        while self.stats()["in_flight"]:
            time.sleep(0.1)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def write_queries(path: Path, n: int) -> Path:
    rows = []
    with gzip.open(REPO / "rise_batch" / "data" / "enwiki_sample.jsonl.gz", "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= n:
                break
            doc = json.loads(line)
            title = doc["text"].split("title: ", 1)[1].split("\n", 1)[0].strip('"')
            marker = f"[fake:calls={2 + 3 * (i % 4)}]"
            rows.append({"query_id": doc["docid"], "query": f"What does the article on '{title}' say about it? "
                         f"{marker}", "answer": title, "gold_doc_ids": [doc["docid"]]})  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


class Bench:
    def __init__(self, engine: Path, docs: Path, queries: Path, root: Path) -> None:
        self.engine, self.docs, self.queries, self.root = engine, docs, queries, root
        self.n = 0

    def out(self) -> Path:
        self.n += 1
        d = self.root / f"out{self.n}"
        d.mkdir(mode=0o755)
        return d

    def argv(self, out: Path, server: Server, cap: float | None) -> list[str]:
        more = ["--max-cost", f"{cap:.6f}"] if cap is not None else []
        return [
            sys.executable, "-m", "rise_batch.cli", "run", "--queries", str(self.queries), "--out", str(out),
            "--docs", str(self.docs), "--index", str(self.docs / "index"), "--index-backend", "numpy",
            "--no-progress", "--base-url", server.url, "--model", MODEL, "--rpm", "1000000", "--tpm", "10000000000",
            "--max-output-tokens", "2000", "--workers", "0", "--concurrency", "8", *more,
        ]  # fmt: skip

    def start(self, out: Path, server: Server, cap: float | None) -> subprocess.Popen:
        env = os.environ | {"PYTHONPATH": str(self.engine)}  # run from elsewhere: `-m` puts the cwd first on the path
        return subprocess.Popen(self.argv(out, server, cap), env=env, cwd=self.root, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip

    def run(self, out: Path, server: Server, cap: float | None) -> int:
        proc = self.start(out, server, cap)
        proc.communicate()
        return proc.returncode

    def killed_at(self, out: Path, server: Server, cap: float, served: int) -> None:
        """The capped run, killed with SIGKILL once the server has answered `served` more requests."""
        base = server.served()
        proc = self.start(out, server, cap)
        while server.served() - base < served and proc.poll() is None:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        server.idle()


def recorded(out: Path) -> float:
    """What the engine says the directory spent: the journal's figure when there is one, else the old ledger."""
    if (out / "spend").is_dir():
        from rise_batch.money.spent import spent_usd  # the checkout this bench runs from (python -m at its root)

        return spent_usd(out)
    total = 0.0
    for p in (out / "trajectories").glob("*.json") if (out / "trajectories").is_dir() else ():
        t = json.loads(p.read_text())
        total += float(t.get("cost_usd") or 0) + float((t.get("earlier_runs") or {}).get("cost_usd") or 0)
    return total


def uncapped(b: Bench) -> tuple[float, int]:
    server = Server()
    try:
        assert b.run(b.out(), server, None) == 0
        return server.bill(), server.served()
    finally:
        server.close()


def row(b: Bench, name: str, flags: tuple[str, ...], cap: float, steps) -> dict[str, Any]:
    server = Server(*flags)
    try:
        out = b.out()
        codes = steps(b, out, server, cap)
        return {"row": name, "bill": round(server.bill(), 4), "recorded": round(recorded(out), 4), "cap": cap,
                "exits": codes}  # fmt: skip
    finally:
        server.close()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.spend_rows", description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=Path, required=True)
    p.add_argument("--engine", type=Path, default=REPO)
    p.add_argument("--queries", type=int, default=8)
    p.add_argument("--rows", default="1,2,3,4,5,6,7,8")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "spend_rows.json")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="spend-rows-"))
    os.chmod(root, 0o755)
    b = Bench(args.engine.resolve(), args.docs.resolve(), write_queries(root / "q.jsonl", args.queries), root)
    full, calls = uncapped(b)
    cap = round(0.6 * full, 6)
    results: dict[str, Any] = {"engine": str(args.engine), "queries": args.queries, "uncapped_bill": round(full, 4),
                               "uncapped_calls": calls, "cap": cap, "rows": []}  # fmt: skip
    print(json.dumps({k: v for k, v in results.items() if k != "rows"}), flush=True)

    def kill_resume(fraction: float):
        def steps(b: Bench, out: Path, server: Server, cap: float) -> list[int]:
            b.killed_at(out, server, cap, max(1, int(calls * fraction)))
            return [-9, b.run(out, server, cap)]

        return steps

    def twice_at_once(b: Bench, out: Path, server: Server, cap: float) -> list[int]:
        procs = [b.start(out, server, cap) for _ in range(2)]
        return [p.communicate() and p.returncode for p in procs]

    def capped_then_resume(b: Bench, out: Path, server: Server, cap: float) -> list[int]:
        return [b.run(out, server, cap), b.run(out, server, cap)]

    def edited(value: float):
        def steps(b: Bench, out: Path, server: Server, cap: float) -> list[int]:
            first = b.run(out, server, cap)
            for path in (out / "trajectories").glob("*.json"):
                path.write_text(json.dumps(json.loads(path.read_text()) | {"cost_usd": value}))
            return [first, b.run(out, server, cap)]

        return steps

    rows = {
        "1": ("kill -9 at 30% of the calls, then the same command", (), kill_resume(0.3)),
        "2": ("the same with 1 s latency", ("--latency-ms", "1000"), kill_resume(0.2)),
        "3": ("two runs on one --out at once", (), twice_at_once),
        "4": ("usage missing", ("--usage", "missing"), capped_then_resume),
        "4s": ("usage as strings", ("--usage", "string"), capped_then_resume),
        "4n": ("usage NaN", ("--usage", "nan"), capped_then_resume),
        "4x": ('usage "x"', ("--usage", "x"), capped_then_resume),
        "5": ("usage zeros", ("--usage", "zeros"), capped_then_resume),
        "6": ("usage a tenth", ("--usage", "tenth"), capped_then_resume),
        "7": ("usage negative", ("--usage", "negative"), capped_then_resume),
        "8": ("trajectory cost_usd set to -100, then resume", (), edited(-100.0)),
        "8z": ("trajectory cost_usd set to 0, then resume", (), edited(0.0)),
    }
    wanted = args.rows.split(",")
    for key, (name, flags, steps) in rows.items():
        if key in wanted or key.rstrip("snxz") in wanted:
            results["rows"].append({"key": key, **row(b, name, flags, cap, steps)})
            print(json.dumps(results["rows"][-1]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
