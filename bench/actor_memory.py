"""Private memory of trajectory-actor-like processes at 1M documents, loading one index and docs map at once.

A trajectory actor loads the index (`open_retriever`) and the docs' map (`DocStore`), then every search call maps its
hits to relpaths (`Workspace.add`) and paths shown to the agent back to docids. This bench synthesizes a 1M-document
index-like set of files once (no text: only what those loads read), then starts N such processes at once, each
loading both and running its own searches from `--threads` threads at once, as an actor runs its trajectories'
tool calls (3 sub-queries x top-1000, the union's relpaths, the top-10's reverse lookups). Each first imports what a
trajectory actor has loaded (ray, the QueryWorker module with the agent loop and the LLM client; `--imports bare`
leaves that out), and opens the index with the actors' scorer (`--backends numba,auto` alternates bm25s's numba
kernel, the scorer before, with today's numpy one, side by side in one run). WHILE they search, each
process's /proc/PID/smaps_rollup is sampled every `--every` seconds (Rss, Pss, Private_Dirty: the figures of a
real run's actors, peak and median); after the searches, /proc/PID/smaps splits USS (Private_Clean +
Private_Dirty) into anonymous memory (the Python heap) and file mappings (the index's arrays, the string tables).
Every process answers the same searches, and their answers are compared by digest. Each search call (search +
mapping its hits) is timed by the wall clock and by its thread's CPU time, p50; on a busy machine the CPU figure is
the one to compare.

What is synthesized (printed in the output): docids 10% BrowseComp-Plus-like numbers, 90% FineWeb-like
`<urn:uuid:...>`; relpaths `host/Title_words.txt`; a vocabulary of `--terms` random lowercase words (3-16 letters,
a real 1M web corpus gives a few million terms after stemming), ids in a shuffled order as bm25s's set order gives;
a CSC score matrix with Zipf-distributed document frequencies (`--postings` in all) and random scores. Queries are
2-4 words drawn from the 20,000 most frequent terms. The string tables of the index are written as the build writes
them, the docs' table is derived by one process first, as the first actor of a node would.

    python -m bench.actor_memory [--docs 1000000 --terms 2500000 --actors 2 --threads 4 --backends numba,auto]

Writes bench/results/actor_memory.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import REPO, SCRATCH, Run

MB = 1024**2
CHILD = "--child"
HEAVY = ("numba", "llvmlite", "bm25s", "scipy", "ray", "openai")  # modules a child reports having loaded


def synthesize(root: Path, n_docs: int, n_terms: int, n_postings: int, seed: int = 22) -> dict:
    """The index dir and docs dir (corpus/ empty, docmap.parquet) of a synthetic corpus; returns what was made."""
    import bm25s
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rise_batch.index.build import DOCIDS_FILE, K1, METHOD, B, IndexMeta
    from rise_batch.index.tables import write_docid_table, write_vocab_table
    from rise_batch.index.tokenize import TokenizerSettings

    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    n_num = n_docs // 10
    docids = [str(x) for x in rng.choice(10 * n_docs, n_num, replace=False).tolist()]
    docids += [f"<urn:uuid:{u[:8]}-{u[8:12]}-{u[12:16]}-{u[16:20]}-{u[20:32]}>" for u in _hexes(rng, n_docs - n_num)]
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", np.uint8)
    terms: set[str] = set()
    while len(terms) < n_terms:
        lens = rng.integers(3, 17, n_terms)
        chars = letters[rng.integers(0, 26, int(lens.sum()))].tobytes().decode()
        cuts = np.concatenate([[0], np.cumsum(lens)]).tolist()
        terms.update(chars[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True))
    order = sorted(terms)[:n_terms]
    rng.shuffle(order)
    vocab = {t: i for i, t in enumerate(order)}
    vocab[""] = n_terms
    df = np.maximum(1, (n_postings / np.log(n_terms) / np.arange(1, n_terms + 1))).astype(np.int64)
    df = np.minimum(df, n_docs // 2)
    indptr = np.zeros(n_terms + 1, np.int64)
    np.cumsum(df, out=indptr[1:])
    index, docs = root / "index", root / "docs"
    for d in (index, docs / "corpus"):
        d.mkdir(parents=True, exist_ok=True)
    model = bm25s.BM25(k1=K1, b=B, method=METHOD)
    model.scores = {
        "data": rng.uniform(0.1, 4.0, int(indptr[-1])).astype(np.float32),
        "indices": rng.integers(0, n_docs, int(indptr[-1])).astype(np.int32),
        "indptr": indptr,
        "num_docs": n_docs,
    }
    model.vocab_dict, model.nonoccurrence_array = vocab, None
    model.save(index, show_progress=False)
    (index / DOCIDS_FILE).write_text(json.dumps(docids))
    write_docid_table(index, docids)
    write_vocab_table(index, vocab)
    counts = {"n_docs": n_docs, "n_terms": n_terms, "n_postings": int(indptr[-1]), "n_tokens": 0}
    meta = IndexMeta(str(index), K1, B, METHOD, TokenizerSettings(), counts, {}, bm25s.__version__)
    (index / "meta.json").write_text(json.dumps(meta.to_json()))
    words = ["".join(chr(97 + c) for c in rng.integers(0, 26, rng.integers(3, 10))) for _ in range(5000)]
    hosts = [f"www.{words[i]}{words[i + 1]}.com" for i in range(0, 4000, 2)] + ["en.wikipedia.org"] * 500
    rels = [
        f"{hosts[h]}/{'_'.join(words[w] for w in ws)}_{i}.txt"
        for i, (h, ws) in enumerate(
            zip(rng.integers(0, len(hosts), n_docs).tolist(), rng.integers(0, 5000, (n_docs, 5)).tolist(), strict=True)
        )
    ]
    table = pa.table({"docid": docids, "relpath": rels, "shard": pa.array(np.arange(n_docs) // 1000, pa.int32())})
    pq.write_table(table, docs / "docmap.parquet")
    frequent = _stem_stable(order[:20_000])
    picks = rng.integers(0, len(frequent), (20_000, 4)).tolist()
    queries = [" ".join(frequent[j] for j in row[: 2 + i % 3]) for i, row in enumerate(picks)]
    (root / "queries.json").write_text(json.dumps(queries))
    made = {"docs": n_docs, "terms": n_terms, "postings": int(indptr[-1]), "seconds": round(time.perf_counter() - t0)}
    made["bytes"] = {p.name: p.stat().st_size for p in sorted([*index.iterdir(), docs / "docmap.parquet"])}
    return made


def _hexes(rng, n: int) -> list[str]:
    raw = rng.bytes(16 * n).hex()
    return [raw[i : i + 32] for i in range(0, 32 * n, 32)]


def _stem_stable(terms: list[str]) -> list[str]:
    """Terms the query tokenizer leaves as they are (not stopwords, unchanged by the stemmer)."""
    from rise_batch.index.tokenize import TokenizerSettings, query_tokenizer

    tok = query_tokenizer(TokenizerSettings())
    return [t for t in terms if tok(t) == [t]]


def child(root: Path, actor: int, searches: int, threads: int) -> None:
    """One actor-like process: load; then search and map hits from `threads` threads at once (an actor runs its
    trajectories' tool calls on several threads); report; then wait (alive) until the parent says so."""
    import threading

    if os.environ.get("RISE_BENCH_IMPORTS", "actor") == "actor":  # what a trajectory actor has loaded: Ray's
        import openai  # noqa: F401  worker, the QueryWorker module (the agent loop, the LLM client) and openai
        import ray  # noqa: F401

        import rise_batch.agent.stage  # noqa: F401
    from rise_batch.heap import keep_heap_small
    from rise_batch.index.retriever import open_retriever
    from rise_batch.space.docstore import DocStore

    queries = json.loads((root / "queries.json").read_text())
    say = lambda **kw: print(json.dumps(kw), flush=True)  # noqa: E731
    heap = os.environ.get("RISE_BENCH_HEAP", "small")
    if heap != "default":  # as a trajectory worker sets it when it starts (rise_batch/heap.py)
        keep_heap_small(fixed_mmap_threshold=heap == "small")
    t0 = time.perf_counter()
    backend = os.environ.get("RISE_BENCH_BACKEND", "auto")
    index = open_retriever(root / "index", "bm25", backend=backend)
    store = DocStore(root / "docs")
    loaded = time.perf_counter() - t0
    say(loaded=True)
    results: list[tuple] = []

    def work(t: int) -> None:
        rng = __import__("random").Random(t)  # every actor runs the same searches: answers compared by digest
        digest, scored, ms, cpu_ms, found, back = hashlib.sha256(), hashlib.sha256(), [], [], 0, 0
        for _ in range(searches):
            subs = [queries[rng.randrange(len(queries))] for _ in range(3)]
            t1, c = time.perf_counter(), time.thread_time()
            hits = index.search(subs, 1000)
            union = list(dict.fromkeys(d for h in hits for d in h.docids))
            rels = store.relpaths_of(union)
            found += sum(r is not None for r in rels)
            back += sum(store.docid(r) is not None for h in hits for r in store.relpaths_of(h.docids[:10]) if r)
            ms.append((time.perf_counter() - t1) * 1000)
            cpu_ms.append((time.thread_time() - c) * 1000)
            digest.update(json.dumps([[h.docids, h.scores] for h in hits]).encode())
            scored.update(json.dumps([h.scores for h in hits]).encode())
        results.append((t, digest.hexdigest(), ms, cpu_ms, found, back, scored.hexdigest()))

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    results.sort()
    ms, cpu = [x for r in results for x in r[2]], [x for r in results for x in r[3]]
    p50 = lambda xs: round(sorted(xs)[len(xs) // 2], 2)  # noqa: E731
    say(
        ready=True,
        heap=heap,
        backend=index.backend,
        load_s=round(loaded, 2),
        search_map_p50_ms=p50(ms),
        search_map_cpu_p50_ms=p50(cpu),
    )
    say(hits=sum(r[4] for r in results), reverse=sum(r[5] for r in results))
    joined = lambda i: hashlib.sha256("".join(r[i] for r in results).encode()).hexdigest()  # noqa: E731
    say(digest=joined(1), scores_digest=joined(6), modules=sorted(m for m in HEAVY if m in sys.modules))
    sys.stdin.readline()


def rollup(pid: int) -> dict | None:
    """MB of /proc/PID/smaps_rollup (Rss, Pss, Private_Dirty, Private_Clean): what the issue's figures sample."""
    want = {
        "Rss:": "rss_mb",
        "Pss:": "pss_mb",
        "Private_Dirty:": "private_dirty_mb",
        "Private_Clean:": "private_clean_mb",
    }
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        key, *rest = line.split()
        if key in want:
            out[want[key]] = round(int(rest[0]) / 1024, 1)
    return out


class Sampler:
    """smaps_rollup of each process every `every` seconds while the searches run: the peak and the median."""

    def __init__(self, pids: list[int], every: float) -> None:
        import threading

        self.samples: dict[int, list[dict]] = {p: [] for p in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)
        self._thread.start()

    def _run(self, every: float) -> None:
        while not self._stop.wait(every):
            for pid, rows in self.samples.items():
                row = rollup(pid)
                if row:
                    rows.append(row)

    def stop(self) -> list[dict]:
        self._stop.set()
        self._thread.join()
        out = []
        for rows in self.samples.values():
            keys = rows[0].keys() if rows else ()
            out.append(
                {"samples": len(rows)}
                | {f"{k}_max": max(r[k] for r in rows) for k in keys}
                | {f"{k}_p50": sorted(r[k] for r in rows)[len(rows) // 2] for k in keys}
            )
        return out


def measure(pid: int) -> dict:
    """MB of one process: USS/PSS/RSS, and USS split into anonymous memory and each kind of file mapping."""
    import psutil

    rows = psutil.Process(pid).memory_maps(grouped=True)
    uss = lambda m: m.private_clean + m.private_dirty  # noqa: E731
    out = {
        "uss_mb": sum(map(uss, rows)),
        "pss_mb": sum(m.pss for m in rows),
        "rss_mb": sum(m.rss for m in rows),
        "uss_anonymous_mb": sum(uss(m) for m in rows if not m.path.startswith("/")),
        "uss_index_arrays_mb": sum(uss(m) for m in rows if m.path.endswith(".index.npy")),
        "uss_tables_mb": sum(uss(m) for m in rows if m.path.endswith(".strtab")),
        "tables_rss_mb": sum(m.rss for m in rows if m.path.endswith(".strtab")),
    }
    out["uss_libraries_and_other_mb"] = out["uss_mb"] - sum(out[k] for k in list(out)[3:6])
    return {k: round(v / MB, 1) for k, v in out.items()}


def run_actors(
    code: Path, root: Path, n: int, searches: int, threads: int, every: float, heaps: list[str], backends: list[str]
) -> dict:
    # PWD too: a site hook may put the checkout named by the working directory first on the import path
    env = dict(os.environ, PYTHONPATH=str(code), PWD=str(code), DISABLE_TQDM="1")
    cmd = [sys.executable, "-m", "bench.actor_memory", CHILD, str(root)]
    heap = lambda i: heaps[i % len(heaps)]  # noqa: E731
    procs = [
        subprocess.Popen(
            [*cmd, str(i), str(searches), str(threads)],
            cwd=code,
            env=env | {"RISE_BENCH_HEAP": heap(i), "RISE_BENCH_BACKEND": backends[i % len(backends)]},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    for p in procs:
        if not p.stdout.readline():
            raise SystemExit(f"an actor of {code} failed to load (exit {p.wait()})")
    during = Sampler([p.pid for p in procs], every)  # from the moment every actor has loaded: while they search
    reports = []
    for p in procs:
        lines = [p.stdout.readline(), p.stdout.readline()]
        if not all(lines):
            raise SystemExit(f"an actor of {code} failed (exit {p.wait()})")
        reports.append(json.loads(lines[0]) | json.loads(lines[1]))
    searching = during.stop()
    time.sleep(1.0)
    mem = [measure(p.pid) | {"after": rollup(p.pid)} for p in procs]
    for p in procs:
        p.stdin.write("exit\n")
        p.stdin.flush()
    ends = [json.loads(p.stdout.readline()) for p in procs]
    for p in procs:
        p.wait()
    actors = [
        r | {"modules": e["modules"], "while_searching": s} | m
        for r, e, s, m in zip(reports, ends, searching, mem, strict=True)
    ]
    return {
        "code": str(code),
        "actors": actors,
        "digests": [e["digest"] for e in ends],
        "scores_digests": [e["scores_digest"] for e in ends],
    }


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.actor_memory", description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--terms", type=int, default=2_500_000)
    ap.add_argument("--postings", type=int, default=30_000_000)
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--searches", type=int, default=200, help="search calls per thread")
    ap.add_argument("--threads", type=int, default=4, help="threads searching at once in each actor")
    ap.add_argument("--every", type=float, default=3.0, help="seconds between smaps_rollup samples")
    ap.add_argument(
        "--heaps",
        default="arenas",
        help="malloc settings of the actors, in turn: default (glibc's, the heap before), arenas (the worker's: two "
        "arenas), small (two arenas and a fixed mmap threshold); e.g. default,arenas",
    )
    ap.add_argument(
        "--backends",
        default="auto",
        help="index_backend of the actors, in turn: auto (numpy: neither bm25s nor numba loaded), numba (bm25s's "
        "kernel, the scorer before); e.g. numba,auto",
    )
    ap.add_argument(
        "--imports",
        choices=["actor", "bare"],
        default="actor",
        help="actor: each process first imports what a trajectory actor has (ray, the QueryWorker module: the agent "
        "loop, the LLM client); bare: only the index and the docs' map",
    )
    ap.add_argument("--scratch", type=Path, default=SCRATCH / "actor_memory")
    ap.add_argument("--out", type=Path, help="the results file (default bench/results/actor_memory.json)")
    return ap


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [CHILD]:  # one of the actor-like processes run_actors starts
        return child(Path(argv[1]), int(argv[2]), int(argv[3]), int(argv[4]))
    a = build_parser().parse_args(argv)
    run = Run("actor_memory", a)
    root = a.scratch / f"d{a.docs}-t{a.terms}-p{a.postings}"
    made_file = root / "made.json"
    if not made_file.is_file():
        made_file.parent.mkdir(parents=True, exist_ok=True)
        made_file.write_text(json.dumps(synthesize(root, a.docs, a.terms, a.postings), indent=1))
    from rise_batch.space.docstore import DocStore

    DocStore(root / "docs")  # the docs' table, derived once, as the first actor of a node derives it
    res = {"made": json.loads(made_file.read_text())}
    os.environ["RISE_BENCH_IMPORTS"] = a.imports
    backends = a.backends.split(",")
    res["run"] = run_actors(REPO, root, a.actors, a.searches, a.threads, a.every, a.heaps.split(","), backends)
    print(json.dumps(res["run"]["actors"]), flush=True)
    # the same docids and scores within each scorer; the same scores across scorers (ties may be ordered apart)
    res["same_answers"] = all(
        len({d for i, d in enumerate(res["run"]["digests"]) if backends[i % len(backends)] == b}) == 1 for b in backends
    )
    res["same_scores"] = len(set(res["run"]["scores_digests"])) == 1
    print(json.dumps({"same_answers": res["same_answers"], "same_scores": res["same_scores"]}))
    run.write(res, a.out)


if __name__ == "__main__":
    main()
