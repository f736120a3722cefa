"""Query files as users bring them: BrowseComp-Plus-style JSONL, SQuAD-style JSONL with several answers, or TSV.

One reader for every stage that takes a query file (the agent's runs, the judge, sweeps, `eval-retrieval`), kept
below all of them: the agent must not import eval/ to read its input, nor the index layer the agent's.

BrowseComp-Plus ships encrypted; its decrypt script writes JSONL rows with `query_id`, `query`, `answer` and the
gold documents as `gold_docs` (objects with a `docid`), plus `queries.tsv` (id, text). A user's decrypted copy stays
on their machine (never committed); this reader takes it as it comes, and also the simpler shapes the project uses
(`gold_doc_ids: [..]`, `answers: [..]`). Every row must have a query; everything else is optional, because a
retrieval-only or unjudged run needs no answers.

`eval-retrieval` reads the same files with `ids_optional=True`, the format it has always had: there a query id is
only a label in the per-query report, so a row without `query_id` is numbered by its line, ids need not be unique,
the `id` alias is not read (a row keyed `id` keeps its line number), an empty query text is kept (it finds
nothing), answers are not read, and a gold id is the str() of whatever the list holds (a `docid` object gives its
docid). Files it read before yield the same; it now also takes `gold_docs`, `question`, TSV and gzip.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, NamedTuple


class Query(NamedTuple):
    query_id: str
    query: str
    answers: tuple[str, ...] = ()  # acceptable gold answers, first is the canonical one
    gold_doc_ids: tuple[str, ...] = ()

    @property
    def answer(self) -> str | None:
        return self.answers[0] if self.answers else None


class QueryFileError(ValueError):
    """A query file that cannot be used; the message names the file and line."""


def _answers(row: dict[str, Any], where: str) -> tuple[str, ...]:
    found: list[str] = []
    for key in ("answer", "answers"):
        value = row.get(key)
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, dict):  # SQuAD's raw form: {"text": ..., "answer_start": ...}
                v = v.get("text")
            if not isinstance(v, str | int | float) or isinstance(v, bool):
                raise QueryFileError(f"{where}: {key!r} must be a string or a list of strings")
            if str(v).strip() and str(v) not in found:
                found.append(str(v))
    return tuple(found)


def _gold(row: dict[str, Any], where: str, ids_optional: bool = False) -> tuple[str, ...]:
    value = row.get("gold_doc_ids", row.get("gold_docs", []))
    if value is None:
        return ()
    if not isinstance(value, list):
        raise QueryFileError(f"{where}: gold documents must be a list")
    ids = []
    for g in value:
        docid = g.get("docid") if isinstance(g, dict) else g
        if docid is None:
            if not ids_optional:
                raise QueryFileError(f"{where}: a gold document has no docid")
            docid = g  # eval-retrieval has always scored str() of any entry (it then matches no document)
        ids.append(str(docid))
    return tuple(dict.fromkeys(ids))


def parse_query(row: Any, where: str, line: int = 0, ids_optional: bool = False) -> Query:
    """One JSON row; `line` numbers a row without an id when `ids_optional` (see the module docstring)."""
    if not isinstance(row, dict):
        raise QueryFileError(f"{where}: expected a JSON object")
    query = row.get("query", row.get("question"))
    if not isinstance(query, str) or not (query.strip() or ids_optional):
        raise QueryFileError(f"{where}: missing string field 'query'")
    if ids_optional:
        return Query(str(row.get("query_id", line)), query, (), _gold(row, where, ids_optional))
    qid = row.get("query_id", row.get("id"))
    if qid is None or str(qid) == "":
        raise QueryFileError(f"{where}: missing 'query_id'")
    return Query(str(qid), query, _answers(row, where), _gold(row, where))


def read_queries(path: str | Path, limit: int | None = None, *, ids_optional: bool = False) -> list[Query]:
    """All queries of a .jsonl(.gz) or .tsv file, in file order; duplicate ids are refused unless `ids_optional`."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    out: list[Query] = []
    tsv = path.name.endswith((".tsv", ".tsv.gz"))
    with opener(path, "rt", encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}: line {n}"
            if tsv:
                qid, sep, text = line.rstrip("\n").partition("\t")
                if not sep or not text.strip():
                    raise QueryFileError(f"{where}: expected `query_id<TAB>query`")
                out.append(Query(qid.strip(), text.strip()))
            else:
                try:
                    row = json.loads(line)
                except ValueError as e:
                    raise QueryFileError(f"{where}: invalid JSON ({e})") from None
                out.append(parse_query(row, where, n, ids_optional))
            if limit is not None and len(out) >= limit:
                break
    seen: set[str] = set()
    for q in () if ids_optional else out:
        if q.query_id in seen:
            raise QueryFileError(f"{path}: duplicate query_id {q.query_id!r}")
        seen.add(q.query_id)
    return out


def answers_by_id(path: str | Path | None) -> dict[str, tuple[str, ...]]:
    """query_id -> gold answers from a query file; {} when there is no readable file (the trajectory's own
    `answer` is then the only gold answer)."""
    if not path or not Path(path).is_file():
        return {}
    return {q.query_id: q.answers for q in read_queries(path) if q.answers}
