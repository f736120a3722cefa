"""Corpora for the index tests and the reference they are checked against: stock bm25s in one process."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import sample_rows, write_parquet

ARRAYS = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy")
# Characters that exercise the tokenizer's non-ASCII path: accents, dotted capital I (lowercases to 2 chars),
# sharp s, en dash and curly quotes (non-word joiners), NBSP, combining mark, CJK, digits and underscores.
ODD_WORDS = [
    "naïve",
    "café",
    "İstanbul",
    "straße",
    "Ünïcödé",
    "foo–bar",
    "“quoted”",
    "a\u00a0b",
    "e\u0301t",
    "東京都",
    "x_y_z",
    "42nd",
    "3.14159",
    "__init__",
    "Ωmega",
    "ﬁnance",
]
STOPWORD_ONLY = "The and of it is was, to the; and AND The."
NO_TOKENS = "! ? - . a b c 1 2 3 , ; : — …"


def stock_index(texts: list[str]):
    """The paper's pipeline: bm25s.tokenize (en stopwords, PyStemmer english) then BM25(k1=1.5, b=0.75).index."""
    import bm25s
    import Stemmer

    tok = bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False)
    model = bm25s.BM25(k1=1.5, b=0.75)
    model.index(tok, show_progress=False)
    return model


def stock_search(model, docids: list[str], queries: list[str], k: int) -> list[tuple[list[str], list[float]]]:
    """Stock retrieval, reduced to what `search` promises: k clamped, score-0 padding dropped."""
    import bm25s
    import Stemmer

    k = min(k, len(docids))
    tok = bm25s.tokenize(queries, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False)
    strings = bm25s.tokenization.convert_tokenized_to_string_list(tok)
    out = []
    for q in strings:
        ids = model.get_tokens_ids(q)
        if not ids:
            out.append(([], []))
            continue
        res = model.retrieve([ids], k=k, show_progress=False)
        keep = res.scores[0] > 0
        out.append(([docids[i] for i in res.documents[0][keep]], res.scores[0][keep].tolist()))
    return out


def assert_same_hits(ours, ref, k: int) -> None:
    """Same scores in the same order; same docids, except that ties straddling the cut-off may differ."""
    assert len(ours.docids) == len(ref[0])
    np.testing.assert_allclose(ours.scores, ref[1], rtol=1e-6)
    if not ref[1]:
        return
    cut = ref[1][-1] if len(ref[1]) == k else -1.0
    a = {d for d, s in zip(ours.docids, ours.scores, strict=True) if s > cut}
    b = {d for d, s in zip(*ref, strict=True) if s > cut}
    assert a == b


def assert_same_arrays(ours: Path, stock_dir: Path) -> None:
    for name in ARRAYS:
        a, b = np.load(ours / name), np.load(stock_dir / name)
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert np.array_equal(a, b), name
    for name in ("vocab.index.json", "params.index.json"):
        assert (ours / name).read_bytes() == (stock_dir / name).read_bytes(), name


def generated_rows(n_docs: int = 3000, seed: int = 7) -> list[dict]:
    """Seeded documents made of real words (Zipf-weighted), with odd Unicode, empty and stopword-only docs."""
    rng = random.Random(seed)
    words = sorted({w for r in sample_rows(30) for w in re.findall(r"\S+", r["text"])})
    rng.shuffle(words)
    weights = [1.0 / (i + 1) for i in range(len(words))]
    rows = []
    for i in range(n_docs):
        if i % 97 == 5:
            text = STOPWORD_ONLY
        elif i % 89 == 3:
            text = NO_TOKENS
        else:
            n = max(1, int(rng.lognormvariate(4.5, 0.8)))
            toks = rng.choices(words, weights, k=n)
            if rng.random() < 0.2:
                toks.insert(rng.randrange(len(toks) + 1), rng.choice(ODD_WORDS))
            text = " ".join(toks)
        rows.append({"docid": f"g{i:05d}", "text": text, "url": f"https://example.org/{i}"})
    return rows


def generated_queries(rows: list[dict], n: int = 300, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    qs = []
    for _ in range(n):
        words = rng.choice(rows)["text"].split() or ["empty"]
        q = " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
        qs.append(q if rng.random() > 0.1 else q + " zzqxunknown the")
    return qs + ["zzqxunknown", "the of and", "", "naïve café", "ISTANBUL"]


@pytest.fixture(scope="session")
def generated_corpus(tmp_path_factory) -> tuple[Path, list[dict]]:
    """The generated rows as three Parquet files with several row groups each (so shards span files/groups)."""
    rows = generated_rows()
    d = tmp_path_factory.mktemp("gen") / "corpus"
    d.mkdir()
    for j, lo in enumerate(range(0, len(rows), 1000)):
        write_parquet(d / f"part-{j}.parquet", rows[lo : lo + 1000], row_group_size=250)
    return d, rows
