"""Inputs of bench/pipeline_1m.py (and of bench/s3_pipeline.py and bench/search_load.py), all derived from the
shared data: the corpus, the LLM tier's docid list and the queries with their gold documents in the derived corpus.

Queries are SQuAD v1.1 dev questions (squad_wiki, over 24 wiki2015 articles). The derived corpus has no wiki2015
docids, so a question's gold is re-found there: the derived documents that start in its article (their title is
`<article title> (part N)`) and hold one of its answers verbatim (case-insensitive). Questions without such a
document are left out, and the count is reported; questions are taken round-robin over articles.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

_PART = re.compile(r" \(part \d+\)$")


def short(n: int) -> str:
    return f"{n // 10**6}m" if n % 10**6 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)


def derived_corpus(scratch: Path, docs: int, repo: Path) -> tuple[Path, dict]:
    """bench/scratch/syn<N>: made by bench/derive_corpus.py unless a finished one of that size is there."""
    out = scratch / f"syn{short(docs)}"
    info = out / "DERIVED.json"
    if not (info.exists() and json.loads(info.read_text()).get("docs") == docs):
        cmd = ["nice", "-n", "10", sys.executable, "-m", "bench.derive_corpus", "--out", str(out)]
        subprocess.run([*cmd, "--docs", str(docs)], check=True, stdout=subprocess.DEVNULL, cwd=repo)
    return out, json.loads(info.read_text())


def tier_file(path: Path, corpus: Path, llm_docs: int) -> tuple[Path, int]:
    """Every k-th docid of the corpus (k = docs // llm_docs, so at least llm_docs of them), one per line."""
    import pyarrow.parquet as pq

    docids = [
        d for f in sorted(corpus.glob("*.parquet")) for d in pq.read_table(f, columns=["docid"])["docid"].to_pylist()
    ]
    step = max(1, len(docids) // llm_docs)
    chosen = docids[::step]
    path.write_text("\n".join(chosen) + "\n")
    return path, len(chosen)


def squad_queries(corpus: Path, squad: Path, wiki: Path, out: Path, n: int) -> tuple[Path, dict]:
    """Write up to n SQuAD questions with gold re-found in the derived corpus to `out` (JSONL)."""
    import pyarrow.parquet as pq

    titles = {}
    for f in sorted(wiki.glob("*.parquet")):
        t = pq.read_table(f, columns=["docid", "title"])
        titles.update(zip(t["docid"].to_pylist(), t["title"].to_pylist(), strict=True))
    questions = [json.loads(line) for line in squad.open()]
    wanted = {titles[g] for q in questions for g in q["gold_doc_ids"] if g in titles}
    texts: dict[str, dict[str, str]] = defaultdict(dict)  # article title -> derived docid -> lowercased text
    for f in sorted(corpus.glob("*.parquet")):
        pf = pq.ParquetFile(f)
        for g in range(pf.num_row_groups):
            head = pf.read_row_group(g, columns=["title"])["title"].to_pylist()
            if not any(_PART.sub("", t) in wanted for t in head):
                continue
            rows = pf.read_row_group(g, columns=["docid", "title", "text"]).to_pylist()
            for r in rows:
                base = _PART.sub("", r["title"])
                if base in wanted:
                    texts[base][r["docid"]] = r["text"].lower()
    by_article: dict[str, list[dict]] = defaultdict(list)
    no_gold = 0
    for q in questions:
        article = titles.get(q["gold_doc_ids"][0], "")
        answers = [a.lower() for a in q["answers"] if a.strip()]
        gold = [d for d, text in texts.get(article, {}).items() if any(a in text for a in answers)]
        if gold:
            row = {"query_id": q["query_id"], "query": q["query"], "answers": q["answers"], "gold_doc_ids": gold}
            by_article[article].append(row)
        else:
            no_gold += 1
    chosen: list[dict] = []
    while len(chosen) < n and any(by_article.values()):
        for article in sorted(by_article):
            if by_article[article] and len(chosen) < n:
                chosen.append(by_article[article].pop(0))
    out.write_text("".join(json.dumps(r) + "\n" for r in chosen))
    info = {
        "source": "squad_wiki dev questions; gold = derived docs of the question's article holding an answer",
        "questions": len(questions),
        "without_gold_in_corpus": no_gold,
        "written": len(chosen),
        "articles": len({titles.get(q["gold_doc_ids"][0]) for q in questions}),
        "derived_docs_of_those_articles": sum(len(v) for v in texts.values()),
        "gold_per_query_mean": round(sum(len(r["gold_doc_ids"]) for r in chosen) / max(len(chosen), 1), 2),
    }
    return out, info
