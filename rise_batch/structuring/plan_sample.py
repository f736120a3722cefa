"""Which documents `plan` prices, and how many corpus rows each one stands for.

A 1,000-document sample scaled up by rows/n ("simple scaling") swings with the corpus's length distribution: on
wiki2015 (lengths heavy-tailed) the batch cost of 300 seeds was off the fake server's o200k bill by 2.2% on average
and 7.7% at worst. Almost all of that is length: input tokens are ~0.23 per byte plus a fixed prompt, and output
grows with length too. So the estimate is calibrated on the corpus's total text bytes (a regression, or GREG,
estimator): each sampled document gets the weight w_i = (N/n) (1 + (X/N - x̄)(x_i - x̄) / S²), with x its UTF-8
bytes, X the corpus total, N its rows and S² the sample's variance of x, so that the weights sum to N and the
weighted bytes to X exactly; every total of the plan (requests, tokens, dollars, shares) is then sum(w_i y_i).

Why this estimator: it costs nothing. A Parquet footer records each column chunk's uncompressed size, which for a
text column is its bytes plus a 4-byte length per value (plus page headers, whose min/max statistics add 0.01% on
wiki2015's 50 MB chunks and 0.2-0.35% on 1-4 MB ones), so X is read from the footers without decoding a page.
Alternatives measured on the same 300 seeds (error of the batch cost, mean / max): the ratio estimator (tokens =
X * sampled tokens / sampled bytes; the fixed prompt of each request is not proportional to bytes) 1.2% / 4.4%;
stratification by length into 10 deciles 0.5% / 1.7%, but it needs every document's length, a pass that
decompresses the whole text column (1.4 CPU s per 27k documents: ~50 CPU s at 1M, 5x the plan itself); this
regression 0.5% / 1.9% for ~0 CPU s. It also cuts the error of a tier-rule plan ('chars>=22421', three quarters of
the documents priced at 0) from 5.2% to 1.9% mean, but that is still 6.9% at worst: a tier plan needs a margin.

The footer total is trusted only when the sample agrees with it: when the sample's mean bytes are more than 4
standard errors from X/N (long texts repeated many times are dictionary-encoded once, so the footer understates
them), or a sampled row is refused, or a source is not Parquet, the weights are N/n and `method` says why.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import NamedTuple

from rise_batch.corpus.readers import (
    CorpusError,
    check_record,
    column_map,
    count_rows,
    file_errors,
    iter_rows,
    list_sources,
    open_parquet,
    parquet_columns,
    source_format,
)
from rise_batch.types import BadRow, Doc

MAX_Z = 4.0  # the sample's mean bytes may sit this many standard errors from the footers' before they are distrusted
MIN_REGRESSION_DOCS = 30


class PlanSample(NamedTuple):
    docs: list[Doc]
    rows: int  # the corpus's rows
    weights: list[float]  # rows each document stands for; they sum to `rows`
    method: str  # how the weights were set: printed on the plan's `sampling:` line


def plan_sample(corpus: str | Path, n: int, seed: int = 0, columns: str = "", calibrate: bool = True) -> PlanSample:
    """About `n` documents (see sample_docs) with their calibration weights (module docstring); `calibrate`
    False: simple scaling (bench/plan_accuracy.py compares the two)."""
    items, rows = _sample_items(corpus, n, seed, columns=columns)
    docs = [d for d in items if isinstance(d, Doc)]
    if not docs:
        return PlanSample(docs, rows, [], "no document")
    plain = [rows / len(docs)] * len(docs)
    if len(items) >= rows:
        return PlanSample(docs, rows, plain, "every row read")
    if not calibrate:
        return PlanSample(docs, rows, plain, "simple scaling (asked)")
    if len(docs) < len(items):
        return PlanSample(docs, rows, plain, f"simple scaling ({len(items) - len(docs)} refused rows in the sample)")
    total = parquet_text_bytes(corpus, columns)
    if total is None:
        return PlanSample(docs, rows, plain, "simple scaling (no text byte total: not every source is Parquet)")
    sizes = [len(d.text.encode("utf-8", "surrogatepass")) for d in docs]
    mean = sum(sizes) / len(sizes)
    var = sum((x - mean) ** 2 for x in sizes) / len(sizes)
    if len(docs) < MIN_REGRESSION_DOCS or var == 0:
        return PlanSample(docs, rows, plain, f"simple scaling ({len(docs)} documents, too few to regress on)")
    target = total / rows
    z = (target - mean) / math.sqrt(var / (len(docs) - 1))
    if abs(z) > MAX_Z:
        return PlanSample(
            docs,
            rows,
            plain,
            f"simple scaling (the sample's mean text bytes, {mean:,.0f}, are {abs(z):.1f} standard errors from the "
            f"Parquet footers' {target:,.0f}: repeated texts stored once? the footer total is not used)",
        )
    weights = [rows / len(docs) * (1 + (target - mean) * (x - mean) / var) for x in sizes]
    return PlanSample(docs, rows, weights, f"regression on text bytes ({total:,} bytes from the Parquet footers)")


def parquet_text_bytes(corpus: str | Path, columns: str = "") -> int | None:
    """UTF-8 bytes of the text column over the whole corpus from the Parquet footers alone (no page is decoded):
    each chunk's uncompressed size less 4 length bytes per non-null value. None when a source is not Parquet or a
    chunk is missing. Page headers and null flags are counted in (~0.01%); dictionary-deduplicated repeats are not,
    which plan_sample catches against the sample."""
    text = column_map(columns).text
    total = 0
    for src in list_sources(corpus):
        if not source_format(src).row_groups:
            return None
        meta = open_parquet(src).metadata
        for rg in range(meta.num_row_groups):
            group = meta.row_group(rg)
            chunk = next((c for c in map(group.column, range(group.num_columns)) if c.path_in_schema == text), None)
            if chunk is None:
                return None
            stats = chunk.statistics
            nulls = stats.null_count if stats is not None and stats.has_null_count else 0
            total += chunk.total_uncompressed_size - 4 * (group.num_rows - nulls)
    return total


def sample_docs(
    corpus: str | Path, n: int, seed: int = 0, chunks: int = 200, columns: str = ""
) -> tuple[list[Doc], int]:
    """About `n` valid documents from `chunks` runs of consecutive rows at random places, and the corpus's row count.

    Runs, not single rows: a Parquet row group holding no run is never decoded, so sampling a 1M-document corpus
    reads a fraction of it. Runs are short (n / chunks rows): neighbouring rows are alike (same source, same crawl
    stretch), and long runs made the estimate of wiki2015's total tokens swing twice as much as single rows did.
    Rows are checked as the scan checks them (`columns` maps the fields); a sample with no valid document raises
    the first refused row's reason ("no docid column; the rows have [id, contents]") rather than a bare "none".
    """
    items, total = _sample_items(corpus, n, seed, chunks, columns)
    return [d for d in items if isinstance(d, Doc)], total


def _sample_items(
    corpus: str | Path, n: int, seed: int = 0, chunks: int = 200, columns: str = ""
) -> tuple[list[Doc | BadRow], int]:
    """The sampled rows, refused ones included (sample_docs); CorpusError when none of them is valid."""
    sources = list_sources(corpus)
    sizes = [count_rows(s) for s in sources]
    total = sum(sizes)
    if total == 0:
        return [], 0
    if n >= total:
        runs = [(0, total)]
    else:
        chunks = max(1, min(chunks, n))
        per = math.ceil(n / chunks)
        rng = random.Random(seed)
        starts = sorted(rng.sample(range(0, total - per + 1, per), min(chunks, (total - per) // per + 1)))
        runs = [(s, s + per) for s in starts]
    items: list[Doc | BadRow] = []
    offset = 0
    for src, size in zip(sources, sizes, strict=True):
        wanted = [(max(lo, offset) - offset, min(hi, offset + size) - offset) for lo, hi in runs]
        wanted = [(a, b) for a, b in wanted if a < b]
        if wanted and source_format(src).row_groups:
            items.extend(_parquet_sample(src, wanted, columns))
        elif wanted:  # one pass over the file; rows outside the runs are not parsed
            rows = iter_rows(src, wanted[0][0], wanted[-1][1], columns=columns)
            items.extend(d for d in rows if any(a <= d.row < b for a, b in wanted))
        offset += size
    if items and not any(isinstance(d, Doc) for d in items):
        bad = items[0]
        raise CorpusError(f"{bad.source}: row {bad.row}: {bad.reason} (no valid document in the sample)")
    return items, total


def _parquet_sample(src: Path, runs: list[tuple[int, int]], columns: str) -> list[Doc | BadRow]:
    """Rows of `runs` read by row group (a group holding no sampled row is never decoded), checked like the scan."""
    cols = column_map(columns)
    pf = open_parquet(src)
    wanted = parquet_columns(src, pf, cols)
    out: list[Doc | BadRow] = []
    first = 0
    with file_errors(src):
        for rg in range(pf.metadata.num_row_groups):
            size = pf.metadata.row_group(rg).num_rows
            rows = [r for a, b in runs for r in range(max(a, first), min(b, first + size))]
            if rows:
                table = pf.read_row_group(rg, columns=wanted).take([r - first for r in rows])
                out += [check_record(rec, str(src), r, cols) for r, rec in zip(rows, table.to_pylist(), strict=True)]
            first += size
    return out
