"""Derive a large synthetic corpus from real Wikipedia paragraphs, for index scale benchmarks.

How documents are made (printed by the benchmark too): every paragraph (non-empty line after the frontmatter) of
the 26,887 wiki2015 articles goes into one list, in corpus order. A new document draws a target length from a
log-normal distribution (median 600 words, sigma 1.0, so mean ~1,000 words; clipped to 20..30,000 words), starts
at a uniformly random paragraph and takes consecutive paragraphs until the target is reached (so a document reads
like a passage of one article, occasionally running into the next). It gets BrowseComp-Plus-style frontmatter
(title of the article it starts in + part number, url) and a docid `syn-NNNNNNN`. Written as Parquet files of
50,000 documents with row groups of 2,000 rows. Real sentences, none invented; but the vocabulary is
bounded by wiki2015's (~0.5M terms), where a real 1M-document web corpus would have several million.

Usage: python -m bench.derive_corpus --src ../shared/data/wiki2015 --out bench/scratch/syn1m --docs 1000000
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.common import WIKI

MEDIAN_WORDS, SIGMA, MIN_WORDS, MAX_WORDS = 600, 1.0, 20, 30_000
DOCS_PER_FILE, ROW_GROUP = 50_000, 2_000


def _paragraphs(src: Path) -> tuple[list[str], list[int], list[str]]:
    import pyarrow.parquet as pq

    paras: list[str] = []
    words: list[int] = []
    titles: list[str] = []
    for f in sorted(src.glob("*.parquet")):
        t = pq.read_table(f, columns=["title", "text"])
        for title, text in zip(t.column("title").to_pylist(), t.column("text").to_pylist(), strict=True):
            body = text.split("\n---\n", 1)[1] if text.startswith("---\n") and "\n---\n" in text else text
            for line in body.split("\n"):
                n = len(line.split())
                if n:
                    paras.append(line)
                    words.append(n)
                    titles.append(title)
    return paras, words, titles


def derive(src: Path, out: Path, n_docs: int, seed: int = 2015) -> dict:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    paras, words, titles = _paragraphs(src)
    w = np.asarray(words, dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(np.concatenate([w, w]))])  # doubled: a document may wrap around
    rng = np.random.default_rng(seed)
    target = np.clip(rng.lognormal(np.log(MEDIAN_WORDS), SIGMA, n_docs), MIN_WORDS, MAX_WORDS).astype(np.int64)
    start = rng.integers(0, len(paras), n_docs)
    stop = np.searchsorted(cum, cum[start] + target, side="left")  # exclusive end in the doubled list
    stop = np.maximum(stop, start + 1)
    n_words = cum[stop] - cum[start]
    out.mkdir(parents=True, exist_ok=True)
    n_p = len(paras)
    part_of: dict[str, int] = {}
    for f_i, lo in enumerate(range(0, n_docs, DOCS_PER_FILE)):
        rows: dict[str, list[str]] = {"docid": [], "url": [], "title": [], "text": []}
        for i in range(lo, min(lo + DOCS_PER_FILE, n_docs)):
            s, e = int(start[i]), int(stop[i])
            body = "\n".join(paras[j % n_p] for j in range(s, e))
            src_title = titles[s]
            part_of[src_title] = part_of.get(src_title, 0) + 1
            title = f"{src_title} (part {part_of[src_title]})"
            docid = f"syn-{i:07d}"
            url = f"https://synthetic.example/{docid}"
            rows["docid"].append(docid)
            rows["url"].append(url)
            rows["title"].append(title)
            rows["text"].append(f"---\ntitle: {json.dumps(title, ensure_ascii=False)}\nurl: {url}\n---\n{body}")
        pq.write_table(pa.table(rows), out / f"part-{f_i:03d}.parquet", row_group_size=ROW_GROUP)
    info = {
        "docs": n_docs,
        "source_paragraphs": n_p,
        "words_mean": float(n_words.mean()),
        "words_median": float(np.median(n_words)),
        "words_p90": float(np.percentile(n_words, 90)),
        "words_p99": float(np.percentile(n_words, 99)),
        "words_total": int(n_words.sum()),
        "seconds": round(time.perf_counter() - t0, 1),
        "how": __doc__.split("\n\n")[1].replace("\n", " "),
    }
    (out / "DERIVED.json").write_text(json.dumps(info, indent=2))
    return info


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.derive_corpus", description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, default=WIKI, help="the corpus whose paragraphs are drawn (default wiki2015)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--docs", type=int, default=1_000_000)
    return ap


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    print(json.dumps(derive(args.src, args.out, args.docs), indent=2))


if __name__ == "__main__":
    main()
