"""The fast byte-splitting tokenizer yields exactly stock bm25s's terms, counts and first-appearance order."""

from __future__ import annotations

from collections import Counter

import bm25s
import Stemmer
from hypothesis import given, settings
from hypothesis import strategies as st

from rise_batch.index.tokenize import TokenizerSettings, query_tokenizer, tokenize_docs
from rise_batch.types import Doc
from tests.conftest import sample_rows
from tests.index.conftest import NO_TOKENS, ODD_WORDS, STOPWORD_ONLY

PIECES = ODD_WORDS + ["The", "running", "runs", "ran", "and", "I", "x", "a1", "__", "--", ".", ",", "\n", "\t"]
TEXT = st.lists(st.one_of(st.sampled_from(PIECES), st.text(min_size=1, max_size=8)), max_size=30).map(
    lambda parts: " ".join(parts) if len(parts) % 2 else "".join(parts)
)


def stock_terms(texts: list[str]) -> tuple[list[Counter], list[str]]:
    """Per-document term counts and the order in which terms first appear, from stock `bm25s.tokenize`."""
    tok = bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False)
    inv = {i: t for t, i in tok.vocab.items()}
    counts = [Counter(inv[i] for i in ids) for ids in tok.ids]
    order = list(dict.fromkeys(inv[i] for ids in tok.ids for i in ids))
    return counts, order


def our_terms(texts: list[str], settings: TokenizerSettings | None = None) -> tuple[list[Counter], list[str], list]:
    summary, p = tokenize_docs([Doc(f"d{i}", t) for i, t in enumerate(texts)], settings or TokenizerSettings())
    counts = [Counter() for _ in texts]
    for r, t, c in zip(p.rows.tolist(), p.terms.tolist(), p.tfs.tolist(), strict=True):
        counts[r][summary.vocab[t]] += c
    pairs = list(zip(p.rows.tolist(), p.terms.tolist(), strict=True))
    assert pairs == sorted(set(pairs))  # sorted by (row, term), no duplicate pair
    return counts, summary.vocab, summary.lengths.tolist()


def check_same(texts: list[str]) -> None:
    ref_counts, ref_order = stock_terms(texts)
    counts, vocab, lengths = our_terms(texts)
    assert counts == ref_counts
    assert vocab == ref_order
    assert lengths == [sum(c.values()) for c in ref_counts]


@settings(max_examples=300, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=6))
def test_random_unicode_text_tokenizes_like_stock(texts):
    check_same(texts)


def test_sample_corpus_and_edge_documents_tokenize_like_stock():
    texts = [r["text"] for r in sample_rows(40)] + [STOPWORD_ONLY, NO_TOKENS, " ".join(ODD_WORDS), "", "İİ ǅ ﬀ"]
    check_same(texts)


def test_regex_path_for_custom_patterns_matches_fast_path_semantics():
    texts = [r["text"][:3000] for r in sample_rows(5)] + [" ".join(ODD_WORDS)]
    same_pattern_forced_slow = TokenizerSettings(token_pattern=r"(?u)\b\w\w+\b(?#slow)")
    assert our_terms(texts, same_pattern_forced_slow)[:2] == our_terms(texts)[:2]


def test_query_tokenizer_matches_stock_and_keeps_repeats():
    terms = query_tokenizer(TokenizerSettings())
    queries = ["Running runs, the RAN runner!", "naïve café İstanbul", "the of and", "", "x y z", "paris paris"]
    tok = bm25s.tokenize(queries, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False)
    assert [terms(q) for q in queries] == bm25s.tokenization.convert_tokenized_to_string_list(tok)
    assert terms("paris paris") == ["pari", "pari"]


def test_docids_digests_and_source_rows_are_per_document():
    docs = [Doc("a", "alpha beta", row=3), Doc("b", "", row=4), Doc("c", "alpha", row=9)]
    summary, _ = tokenize_docs(docs, TokenizerSettings())
    assert summary.docids == ["a", "b", "c"]
    assert summary.source_rows.tolist() == [3, 4, 9]
    assert summary.lengths.tolist() == [2, 0, 1]
    assert len(summary.digests) == 48 and summary.digests[:16] != summary.digests[32:]
    assert summary.df.tolist() == [2, 1]  # alpha in 2 docs, beta in 1


def test_stopwords_read_without_bm25s_package_are_bm25s_own():
    from bm25s.tokenization import _infer_stopwords

    assert TokenizerSettings().stopword_set() == frozenset(_infer_stopwords("en"))
    assert TokenizerSettings(stopwords="de").stopword_set() == frozenset(_infer_stopwords("de"))
