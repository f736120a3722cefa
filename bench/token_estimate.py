"""What the limiter's token estimate saves over an exact count: µs per call on documents of a few sizes.

The estimate encodes the first ESTIMATE_CHARS characters and scales to the length (tests/llm/test_tokens.py checks
that, and how close it lands); what it costs against `count` is a figure of this machine, so it is measured here
rather than asserted in a test.

    python bench/token_estimate.py [--model gpt-5.4-nano] [--repeat 20] [--out bench/results/token_estimate.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from rise_batch.llm.tokens import counter_for
from tests.conftest import sample_rows

REPO = Path(__file__).resolve().parents[1]


def per_call_us(f, docs: list[str], memo: dict) -> float:
    """Median µs of `f` over the documents, each counted afresh (the counter memoizes short texts it has seen)."""
    runs = []
    for doc in docs:
        memo.clear()
        t = time.perf_counter()
        f(doc)
        runs.append((time.perf_counter() - t) * 1e6)
    return round(statistics.median(runs), 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gpt-5.4-nano")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "token_estimate.json")
    args = ap.parse_args()
    counter = counter_for(args.model)
    text = "\n".join(r["text"] for r in sample_rows(200))
    rows = []
    for size in (4_000, 40_000, 400_000):
        long = text * (size // max(1, len(text)) + 2)
        docs = [long[i * 97 : i * 97 + size] for i in range(args.repeat)]
        count, estimate = (
            per_call_us(counter.count, docs, counter._memo),
            per_call_us(counter.estimate, docs, counter._memo),
        )
        rel = counter.estimate(docs[0]) / max(1, counter.count(docs[0])) - 1
        rows.append({"chars": size, "count_us": count, "estimate_us": estimate, "estimate_error": round(rel, 4)})
        print(json.dumps(rows[-1]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"model": args.model, "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
