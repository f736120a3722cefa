"""Query files as users bring them: BrowseComp-Plus-style JSONL, SQuAD-style rows and lists, TSV, and TREC qrels.

One reader for every stage that takes a query file (the agent's runs, the judge, sweeps, `eval-retrieval`), kept
below all of them: the agent must not import eval/ to read its input, nor the index layer the agent's.

BrowseComp-Plus ships encrypted; its decrypt script writes JSONL rows with `query_id`, `query`, `answer` and the
gold documents as `gold_docs` (objects with a `docid`), plus `queries.tsv` (id, text). A user's decrypted copy stays
on their machine (never committed); this reader takes it as it comes, and also the simpler shapes the project uses
(`gold_doc_ids: [..]`, `answers: [..]`), gzipped or not, and a `.json` file holding one list of such rows. Every
row must have a query; everything else is optional, because a retrieval-only or unjudged run needs no answers.

Two document sets can be gold: the gold documents (`gold_docs` / `gold_doc_ids`, the default) and the evidence
documents (`evidence_docs` / `evidence_doc_ids`, what BrowseComp-Plus's own evaluation scores retrieval against).
A TREC qrels file (`qid iter docid rel`, BrowseComp-Plus ships `qrel_golds.txt` and `qrel_evidence.txt`) replaces
the file's own sets. `select_gold` is the one place that choice is made, for `eval-retrieval`, `run` and the
report alike, so the same gold read three ways gives the same recall everywhere; a choice that finds no gold at
all is refused rather than scored 0.

`eval-retrieval` reads the same files with `ids_optional=True`, the format it has always had: there a query id is
only a label in the per-query report, so a row without `query_id` is numbered by its line, ids need not be unique,
the `id` alias is not read (a row keyed `id` keeps its line number), an empty query text is kept (it finds
nothing), answers are not read, and a gold id is the str() of whatever the list holds (a `docid` object gives its
docid). Files it read before yield the same; it now also takes `gold_docs`, `question`, TSV and gzip.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import IO, Any, NamedTuple

from rise_batch.io import RefusedFile, open_regular
from rise_batch.names import safe_stem
from rise_batch.storage import AnyPath, ObjectPath, location


class Query(NamedTuple):
    query_id: str
    query: str
    answers: tuple[str, ...] = ()  # acceptable gold answers, first is the canonical one
    gold_doc_ids: tuple[str, ...] = ()  # the set recall is scored against (see select_gold)
    evidence_doc_ids: tuple[str, ...] = ()

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


GOLD_SETS = {"gold": ("gold_doc_ids", "gold_docs"), "evidence": ("evidence_doc_ids", "evidence_docs")}


def _gold(row: dict[str, Any], where: str, ids_optional: bool = False, kind: str = "gold") -> tuple[str, ...]:
    ids_key, docs_key = GOLD_SETS[kind]
    value = row.get(ids_key, row.get(docs_key, []))
    if value is None:
        return ()
    if not isinstance(value, list):
        raise QueryFileError(f"{where}: {kind} documents must be a list")
    ids = []
    for g in value:
        docid = g.get("docid") if isinstance(g, dict) else g
        if docid is None:
            if not ids_optional:
                raise QueryFileError(f"{where}: a {kind} document has no docid")
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
    evidence = _gold(row, where, ids_optional, "evidence")
    if ids_optional:
        return Query(str(row.get("query_id", line)), query, (), _gold(row, where, ids_optional), evidence)
    qid = row.get("query_id", row.get("id"))
    if qid is None or str(qid) == "":
        raise QueryFileError(f"{where}: missing 'query_id'")
    return Query(str(qid), query, _answers(row, where), _gold(row, where), evidence)


def _json_list(path: AnyPath, ids_optional: bool) -> list[Query]:
    """A `.json` file holding one list of rows (the SQuAD-style list form); rows are numbered from 1."""
    with _open_text(path, "query file", "--queries") as fh:
        rows = _loads(_read_all(fh, path), path)
    if not isinstance(rows, list):
        raise QueryFileError(f"{path}: a .json query file must hold one list of rows (use .jsonl for one per line)")
    return [parse_query(r, f"{path}: row {n}", n, ids_optional) for n, r in enumerate(rows, 1)]


def read_queries(path: str | Path, limit: int | None = None, *, ids_optional: bool = False) -> list[Query]:
    """All queries of a .jsonl, .tsv or .json file (each maybe .gz), in file order; duplicate ids are refused
    unless `ids_optional`."""
    path = location(path)  # a path or a URI: `s3://b/q.jsonl` is never taken for the relative path `s3:/b/q.jsonl`
    tsv = path.name.endswith((".tsv", ".tsv.gz"))
    if path.name.endswith((".json", ".json.gz")):
        out = _json_list(path, ids_optional)[:limit]
    else:
        out = _read_lines(path, tsv, limit, ids_optional)
    if not ids_optional:
        _refuse_shared_names(path, out)
    return out


def _refuse_shared_names(path: AnyPath, queries: list[Query]) -> None:
    """Each query's trajectory and judgment are files named by its id (`names.safe_stem`), so two ids must not
    share a file name: `a/b` and `a_b-c14cddc0` (the first one's safe name) would both be reported as run, the second
    file overwriting the first. Duplicate ids are the plain case of the same thing."""
    seen: dict[str, str] = {}
    for q in queries:
        stem = safe_stem(q.query_id)
        other = seen.get(stem)
        if other is None:
            seen[stem] = q.query_id
            continue
        if other == q.query_id:
            raise QueryFileError(f"{path}: duplicate query_id {q.query_id!r}")
        raise QueryFileError(
            f"{path}: query ids {other!r} and {q.query_id!r} would share the file name {stem}.json "
            "(ids are made safe for file names); rename one of them"
        )


def _read_lines(path: AnyPath, tsv: bool, limit: int | None, ids_optional: bool) -> list[Query]:
    out: list[Query] = []
    with _open_text(path, "query file", "--queries") as fh:
        for n, line in enumerate(_lines(fh, path), 1):
            if not line.strip():
                continue
            where = f"{path}: line {n}"
            if tsv:
                qid, sep, text = line.rstrip("\n").partition("\t")
                if not sep or not text.strip() or not qid.strip():
                    raise QueryFileError(f"{where}: expected `query_id<TAB>query` (both non-empty)")
                out.append(Query(qid.strip(), text.strip()))
            else:
                out.append(parse_query(_loads(line, where), where, n, ids_optional))
            if limit is not None and len(out) >= limit:
                break
    return out


def _open_text(path: AnyPath, what: str, flag: str) -> IO[str]:
    """`path` as UTF-8 text (gunzipped when it ends in .gz), if it is a regular file: a directory or a FIFO is a
    one-line QueryFileError naming it (a FIFO used to hang the reader, a directory to be a traceback); an object
    of object storage is read as a stream."""
    try:
        raw = path.open("rb") if isinstance(path, ObjectPath) else open_regular(path)
    except FileNotFoundError:
        raise QueryFileError(f"{what} {path} does not exist (check the {flag} path)") from None
    except RefusedFile as e:
        raise QueryFileError(f"{what} {e}") from None
    except OSError as e:
        if isinstance(path, ObjectPath):  # storage unreachable: its own one line (errors.as_user_error)
            raise
        raise QueryFileError(f"{what} {path} cannot be read: {e.strerror}") from None
    binary: IO[bytes] = gzip.GzipFile(fileobj=raw, mode="rb") if path.suffix == ".gz" else raw
    return io.TextIOWrapper(binary, encoding="utf-8")


def _lines(fh: IO[str], path: AnyPath) -> Any:
    """The lines of `fh`; a file that is not UTF-8 (or not gzip, for .gz) is a QueryFileError naming it."""
    try:
        yield from fh
    except (UnicodeDecodeError, OSError, EOFError) as e:
        raise QueryFileError(
            f"{path}: cannot be read as {'gzipped ' if path.suffix == '.gz' else ''}UTF-8 text ({e})"
        ) from None


def _read_all(fh: IO[str], path: AnyPath) -> str:
    return "".join(_lines(fh, path))


def _loads(text: str, where: str | Path) -> Any:
    """JSON, with invalid and too deeply nested input (a RecursionError traceback before) as one-line errors."""
    try:
        return json.loads(text)
    except RecursionError:
        raise QueryFileError(f"{where}: JSON nested too deeply") from None
    except ValueError as e:
        raise QueryFileError(f"{where}: invalid JSON ({e})") from None


def answers_by_id(path: str | Path | None) -> dict[str, tuple[str, ...]]:
    """query_id -> gold answers from a query file; {} when there is no readable file (the trajectory's own
    `answer` is then the only gold answer)."""
    if not path or not location(path).is_file():
        return {}
    return {q.query_id: q.answers for q in read_queries(path) if q.answers}


def read_qrels(path: str | Path) -> dict[str, tuple[str, ...]]:
    """query id -> relevant docids (rel > 0, file order) of a TREC qrels file: `qid iter docid rel` per line,
    whitespace-separated (the iteration column, `0` or `Q0`, is ignored, as trec_eval ignores it)."""
    path = location(path)
    found: dict[str, dict[str, None]] = {}
    with _open_text(path, "qrels file", "--qrels") as fh:
        for n, line in enumerate(_lines(fh, path), 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 4:
                raise QueryFileError(f"{path}: line {n}: expected 4 columns `qid iter docid rel`, got {len(parts)}")
            try:
                rel = int(parts[3])
            except ValueError:
                raise QueryFileError(f"{path}: line {n}: relevance {parts[3]!r} is not an integer") from None
            docs = found.setdefault(parts[0], {})
            if rel > 0:
                docs[parts[2]] = None
    relevant = {qid: tuple(docs) for qid, docs in found.items() if docs}
    if not relevant:
        raise QueryFileError(f"{path}: no relevant document (a qrels line is `qid iter docid rel` with rel > 0)")
    return relevant


def select_gold(
    queries: list[Query], gold: str = "gold", qrels: str | Path | None = None, source: str | Path = "the query file"
) -> list[Query]:
    """The queries with `gold_doc_ids` set to the chosen gold: the file's gold documents (`gold`), its evidence
    documents (`evidence`), or a qrels file's relevant documents (which replace both). A choice that gives no query
    any gold is an error naming the file and the remedy, never a recall of 0 over nothing."""
    if gold not in GOLD_SETS:
        raise QueryFileError(f"gold must be one of {', '.join(GOLD_SETS)}, got {gold!r}")
    if qrels:
        table = read_qrels(qrels)
        if queries and not any(q.query_id in table for q in queries):
            raise QueryFileError(
                f"{qrels}: names none of the {len(queries)} query ids of {source} (first qrels id "
                f"{next(iter(table))!r}, first query id {queries[0].query_id!r}); the qrels must use the query ids"
            )
        return [q._replace(gold_doc_ids=table.get(q.query_id, ())) for q in queries]
    if gold == "evidence":
        if queries and not any(q.evidence_doc_ids for q in queries):
            raise QueryFileError(
                f"{source}: no query has evidence documents (evidence_docs or evidence_doc_ids); "
                "use --gold gold, or --qrels with an evidence qrels file"
            )
        return [q._replace(gold_doc_ids=q.evidence_doc_ids) for q in queries]
    return list(queries)


def gold_label(gold: str = "gold", qrels: str | Path | None = None) -> str:
    """What the gold of a run or a result is, in words a report can print."""
    return f"qrels {Path(qrels).name}" if qrels else f"{gold} documents"
