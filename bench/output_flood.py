"""What hostile output costs the harness: cleaning throughput, and a call's wall time and the harness's longest
stall while a sandboxed command floods its output with C1 control characters.

The old cleaner rescanned the rest of the text after every C1 string opener without a terminator (quadratic, with the
GIL held): a 1 s cap became 30 s. Figures for a before-checkout come from running this script with its code first on
the path (`PYTHONPATH=../before python bench/output_flood.py --out bench/results/output_flood_before.json`); use
`--small` there, or the quadratic cleaner takes minutes per row.

    python bench/output_flood.py [--caps 1 4] [--small] [--out bench/results/output_flood.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path

from rise_batch.space.output import Cleaner
from rise_batch.space.sandbox import Sandbox, SandboxLimits

REPO = Path(__file__).resolve().parents[1]
FLOOD = "python3 -c \"import sys\nwhile True: sys.stdout.buffer.write(b'\\xc2\\x90' * 65536)\""
# units repeated to fill a read: openers without a terminator, complete strings, escapes that fail, plain controls
UNITS = {
    "c1": "\x90",
    "c1+st": "\x90\x9c",
    "osc+esc": "\x1b]\x1bX",
    "esc+c1": "\x1b\x90",
    "csi": "\x1b[1m",
    "nul": "\x00",
}


def cleaning(chars: int) -> dict:
    """Mchar/s of the incremental cleaner on `chars` characters of each unit, fed in 64 KiB reads."""
    out = {}
    for name, unit in UNITS.items():
        data = (unit * (chars // len(unit))).encode()
        clean, start = Cleaner(), time.perf_counter()
        for i in range(0, len(data), 1 << 16):
            clean.feed(data[i : i + (1 << 16)])
        clean.feed(b"", final=True)
        out[name] = round(chars / (time.perf_counter() - start) / 1e6, 2)
    return out


class Ticker:
    """A thread that wants the GIL every 10 ms: its longest gap is how long the harness's other threads froze."""

    def __init__(self) -> None:
        self.worst, self.stop = 0.0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        last = time.monotonic()
        while not self.stop.wait(0.01):
            now = time.monotonic()
            self.worst, last = max(self.worst, now - last - 0.01), now

    def close(self) -> float:
        self.stop.set()
        self.thread.join()
        return round(self.worst, 3)


def flood(root: Path, cap: float, persistent: bool) -> dict:
    with Sandbox(root, SandboxLimits(timeout_s=cap), persistent=persistent) as box:
        box.run("true")
        ticker, start = Ticker(), time.monotonic()
        res = box.run(FLOOD)
        wall = time.monotonic() - start
        stall = ticker.close()
    kind = "long-lived" if persistent else "one-shot"
    return {"cap_s": cap, "sandbox": kind, "wall_s": round(wall, 2), "timed_out": res.timed_out, "stall_s": stall}


def cat_doc(root: Path, mib: int) -> dict:
    """`cat` of a document of U+0090 around one line of text, under a 60 s cap."""
    half = b"\xc2\x90" * (mib << 19)
    (root / "c1.txt").write_bytes(half + b"visible\n" + half)
    os.chmod(root / "c1.txt", 0o644)
    with Sandbox(root, SandboxLimits(timeout_s=60)) as box:
        start = time.monotonic()
        res = box.run("cat c1.txt")
    wall = time.monotonic() - start
    return {"mib": mib * 2, "wall_s": round(wall, 2), "timed_out": res.timed_out, "output": res.output[:40]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--caps", type=float, nargs="+", default=[1.0, 4.0])
    ap.add_argument("--small", action="store_true", help="16k characters per cleaning row, a 1 MiB document")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "output_flood.json")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rise-bench-flood-"))
    os.chmod(root, 0o755)
    chars = 16_000 if args.small else 4_000_000
    res: dict = {"cleaning_mchar_per_s": cleaning(chars), "cleaning_chars": chars, "floods": []}
    print(json.dumps(res["cleaning_mchar_per_s"]), flush=True)
    for cap in args.caps:
        for persistent in (True, False):
            res["floods"].append(flood(root, cap, persistent))
            print(json.dumps(res["floods"][-1]), flush=True)
    res["cat"] = cat_doc(root, 1 if args.small else 4)
    print(json.dumps(res["cat"]), flush=True)
    res["load_1m"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
