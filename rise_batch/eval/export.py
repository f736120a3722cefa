"""Results in the files the field's tools read: TREC run files and BrowseComp-Plus (BCP) run directories.

A TREC run file is `qid Q0 docid rank score tag`, one line per retrieved document (trec_eval, pyserini and
ir_measures read it). trec_eval orders a query's lines by score, not by the rank column, so scores are written at
full precision: rounding would turn distinct BM25 scores into ties and reorder them.

A BCP run directory holds one JSON file per query, the shape BCP's `search_agent` clients write and its
`scripts_evaluation/evaluate_run.py` and `evaluate_with_openai.py` read: `query_id`, `status` (`completed` when the
agent answered, else `incomplete`, so BCP counts it as unanswered), `result` (the tool calls, then the final reply
as the last item of type `output_text`), `tool_call_counts`, `retrieved_docids` (BCP scores its retrieval recall
against them) and `metadata.model`. The directory holds nothing else with a `.json` suffix, because those scripts
take every `*.json` in it for a run file.

BCP's citation metrics read `[docid]` in the final reply. Agents here cite the workspace files they read (a path
`<host>/<title>.txt`), or, for the retrieval agent, docids; the export rewrites each mention of a document the
agent had in hand (its search union and what it was shown) into `[docid]` through the docs directory's docmap. BCP
extracts only digits from brackets, as its docids are numbers: on a corpus with other docids its citation figures
do not apply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rise_batch.agent.systems import get_system
from rise_batch.eval.rundir import load_run
from rise_batch.io import write_json_atomic, write_text_atomic
from rise_batch.space.docstore import load_docmap
from rise_batch.storage import AnyPath, ObjectPath, location

BCP_COMPLETED, BCP_INCOMPLETE = "completed", "incomplete"


def _trec_token(value: str, what: str, qid: str) -> str:
    if not value or any(c.isspace() for c in value):
        raise ValueError(f"query {qid!r}: {what} {value!r} is empty or holds whitespace, which a TREC run cannot hold")
    return value


def write_trec_run(path: str | Path, ranked: Iterable[tuple[str, list[str], list[float]]], tag: str) -> int:
    """Write `qid Q0 docid rank score tag` lines for (query id, docids, scores) in rank order; returns the line
    count. An id with whitespace is refused (it would shift every column after it)."""
    _trec_token(tag, "run tag", "-")
    lines = []
    seen: set[str] = set()
    for qid, docids, scores in ranked:
        if _trec_token(qid, "query id", qid) in seen:
            raise ValueError(f"query id {qid!r} appears twice: a TREC run needs one ranking per query id")
        seen.add(qid)
        for rank, (docid, score) in enumerate(zip(docids, scores, strict=True), 1):
            lines.append(f"{qid} Q0 {_trec_token(docid, 'docid', qid)} {rank} {float(score)!r} {tag}\n")
    write_text_atomic(path, "".join(lines))
    return len(lines)


# What a path mention's directory prefix may hold: anything but white space, brackets and quotes.
_PREFIX_STOP = frozenset(" \t\n\r\f\v[](){}<>`'\"")


def cite(text: str, mentions: dict[str, str], bare_docids: bool = False) -> str:
    """`text` with each mention of a document (a relpath, bare or bracketed, after any directory prefix) turned into
    `[docid]`; with `bare_docids`, a docid standing alone becomes `[docid]` too. `mentions` maps relpath -> docid.

    Linear in the text: the pattern finds the relpaths themselves (a literal alternation, longest first), and the
    directory prefix before one (`/ws/q/` in `/ws/q/<relpath>`) is found by walking back over the characters a
    prefix may hold, never past the previous mention. A prefix matched by the pattern would be rescanned from every
    `/` of a long run of them (60,000 `/` took 25 s)."""
    if mentions:
        alts = "|".join(re.escape(m) for m in sorted(mentions, key=len, reverse=True))
        path = re.compile(rf"(?<![\w.\-])({alts})(?![\w/\-]|\.\w)")
        parts: list[str] = []
        done = 0  # end of the text already copied into parts
        for m in path.finditer(text):
            start = _prefix_start(text, done, m.start())
            if start > done and text[start - 1] == "[":
                start -= 1
            end = m.end() + (text[m.end() : m.end() + 1] == "]")
            parts += [text[done:start], f"[{mentions[m.group(1)]}]"]
            done = end
        text = "".join(parts) + text[done:]
    if bare_docids:
        docids = sorted(set(mentions.values()), key=len, reverse=True)
        if docids:
            alts = "|".join(re.escape(d) for d in docids)
            text = re.sub(rf"(?<![\w\[\-])({alts})(?![\w\]\-])", r"[\1]", text)
    return text


def _prefix_start(text: str, floor: int, at: int) -> int:
    """Where the mention at `at` starts once its directory prefix is included: `at` when no `/` precedes it, else the
    start of the run of prefix characters before it (not before `floor`), moved forward to the first position a
    word can start at (after a character other than a word character, `.` or `-`)."""
    if at <= floor or text[at - 1] != "/":
        return at
    start = at - 1
    while start > floor and text[start - 1] not in _PREFIX_STOP:
        start -= 1
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_.-"):
        start += 1  # mid-word (right after the previous mention): the prefix starts after its next separator
    return start


def bcp_record(traj: dict[str, Any], relpath_of: dict[str, str], bare_docids: bool) -> dict[str, Any]:
    """One BCP run file from one trajectory; `relpath_of` maps docid -> relpath (the docs' docmap)."""
    in_hand = dict.fromkeys([*(traj.get("retrieved_docids") or ()), *(traj.get("surfaced_docids") or ())])
    mentions = {relpath_of[d]: d for d in in_hand if d in relpath_of}
    result: list[dict[str, Any]] = [
        {
            "type": "tool_call",
            "tool_name": str(s.get("tool")),
            "arguments": json.dumps(s.get("arguments") or {}, ensure_ascii=False),
            "output": str(s.get("output") or ""),
        }
        for s in traj.get("steps") or ()
    ]
    final = (traj.get("final_text") or "").strip()
    answered = traj.get("stop_reason") == "answered" and bool(final)
    if final:
        result.append({"type": "output_text", "tool_name": None, "arguments": None, "output": cite(final, mentions)})
        if bare_docids:
            result[-1]["output"] = cite(result[-1]["output"], mentions, bare_docids=True)
    usage = traj.get("usage") or {}
    tokens = {k: int(usage.get(k) or 0) for k in ("input_tokens", "cached_input_tokens", "output_tokens")}
    return {
        "metadata": {
            "model": str(traj.get("model") or ""),
            "system": traj.get("system"),
            "stop_reason": traj.get("stop_reason"),
            "config_hash": traj.get("config_hash"),
        },
        "query_id": str(traj["query_id"]),
        "tool_call_counts": {str(k): int(v or 0) for k, v in (traj.get("tool_calls") or {}).items()},
        "usage": {
            "input_tokens": tokens["input_tokens"],
            "input_tokens_cached": tokens["cached_input_tokens"],
            "output_tokens": tokens["output_tokens"],
            "total_tokens": tokens["input_tokens"] + tokens["output_tokens"],
        },
        "status": BCP_COMPLETED if answered else BCP_INCOMPLETE,
        "retrieved_docids": [str(d) for d in traj.get("retrieved_docids") or ()],
        "result": result,
    }


def export_bcp(run_dir: str | Path, out_dir: str | Path, docs: str | Path | None = None, force: bool = False) -> dict:
    """Write one BCP run file per trajectory of `run_dir` into `out_dir`; returns counts. Refuses an unreadable
    trajectory (it would silently be a missing query) and an `out_dir` already holding `.json` files (BCP's scripts
    would score them too) unless `force`, which removes them first."""
    run = load_run(run_dir)
    if run.unreadable:
        raise ValueError(f"cannot export {run.path}: {run.unreadable[0]}")
    if not run.trajectories:
        raise ValueError(f"{run.path} has no trajectory of its configuration to export")
    config = run.meta.get("config")
    docs = docs or (config.get("docs") if isinstance(config, dict) else None)
    if not isinstance(docs, str | Path) or not docs or not (location(docs) / "docmap.parquet").is_file():
        raise FileNotFoundError(
            f"no docmap.parquet in the run's docs directory {docs!r}: pass --docs DIR (the `structure` output the "
            "run read), which maps the cited files to docids"
        )
    relpath_of = load_docmap(docs)
    out = location(out_dir)
    old = _old_run_files(out, force)
    for f in old:
        f.unlink()
    out.mkdir(parents=True, exist_ok=True)
    system = run.meta.get("system")
    bare = isinstance(system, str) and bool(system) and get_system(system).tool_kind.cites_docids
    counts = {BCP_COMPLETED: 0, BCP_INCOMPLETE: 0}
    for stem, traj in sorted(run.trajectories.items()):
        record = bcp_record(traj, relpath_of, bare)
        counts[record["status"]] += 1
        write_json_atomic(out / f"{stem}.json", record)
    return {"files": len(run.trajectories), "stale_left_out": len(run.stale), **counts}


def _old_run_files(out: AnyPath, force: bool) -> list[AnyPath]:
    """The `.json` files already in `out`, which BCP's scripts would read as run files too: refused unless `force`.
    Whatever else is named `*.json` there (a directory, a FIFO) is never removed: refused, naming it."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out} exists and is not a directory: name a new or an empty directory")
    old = sorted(out.glob("*.json")) if out.is_dir() else []
    odd = [f for f in old if not (isinstance(f, ObjectPath) or f.is_symlink() or f.is_file())]
    if odd:
        raise FileExistsError(
            f"{odd[0]} is a directory or a special file named like a run file, which BCP's scripts would read as "
            "one: choose an empty --out"
        )
    if old and not force:
        raise FileExistsError(
            f"{out} already holds {len(old)} .json file(s) ({old[0].name}); BCP's scripts would "
            "read them as run files: choose an empty --out or pass --force to replace them"
        )
    return old
