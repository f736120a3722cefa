"""The tools an agent calls, as a library: RISE (search/bash/read over a per-query workspace) and the baselines.

Every tool returns a ToolResult: the text the model sees plus the docids it surfaced (shown in a preview, a read
or bash output) and the docids it retrieved, which the trajectory needs for gold_R and cov_mean. Tools never
raise on bad model input: a wrong argument becomes an error text the model can act on. `ToolSet.call` checks what
no tool can use before dispatch (JSON nested past the parser's depth, strings that are not text: lone surrogates
from `\ud800` escapes, strings past MAX_ARGUMENT_CHARS), and an exception a tool still raises becomes an error
text too (logged with its traceback), because an exception would end the whole trajectory as `api_error`.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import os
import re
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from rise_batch.space import schemas
from rise_batch.space.docstore import DocStore
from rise_batch.space.fileview import (
    MAX_READ_LINES,
    SNIPPET_HEAD_BYTES,
    PathRefused,
    agent_relpath,
    leading_text,
    open_inside,
    prefetch_heads,
    read_numbered,
    snippet_line,
)
from rise_batch.space.safe_open import Below, NotADocument
from rise_batch.space.sandbox import Sandbox, SandboxLimits
from rise_batch.space.workspace import Workspace

log = logging.getLogger(__name__)

# A command capped at the deadline still gets this long (a cap of 0 would not run it): enough for the sandbox to
# start (cgroup, private mounts, bwrap: ~50 ms on a loaded machine) and run a quick command.
MIN_COMMAND_S = 0.25
MAX_ARGUMENT_CHARS = 100_000  # one string argument; a bash command cannot be longer anyway (the kernel's 128 KiB)
SNIPPET_CHARS_PER_TOKEN = 4  # the retrieval baseline's "512-token" snippets, without a tokenizer dependency
_PATH_TOKEN = re.compile(r"[^\s:]+")


class ToolResult(NamedTuple):
    text: str
    surfaced: tuple[str, ...] = ()  # docids the model was shown
    retrieved: tuple[str, ...] = ()  # docids this call added to the search union
    error: bool = False
    # where the call's time went, in ms per phase (search: search/link/preview; bash: the sandbox's phases), for
    # the run's event log only: a loaded run's tail cannot be split from whole-call times (issue 14)
    phases: dict[str, float] | None = None


class SearchIndex(Protocol):
    def search(self, queries: list[str], k: int) -> list[Any]: ...  # list[Hits(docids, scores)]


def coerce_queries(value: Any) -> tuple[list[str], str]:
    """The forms models send for a list of queries -> (queries, note saying what was corrected, or "")."""
    note = ""
    if isinstance(value, str):
        s = value.strip()
        parsed = None
        if s.startswith("["):
            try:
                parsed = json.loads(s)
            except json.JSONDecodeError:
                parsed = None
        if isinstance(parsed, list):
            value, note = parsed, "`queries` arrived as a JSON-encoded string; parsed it as a list"
        else:
            value, note = [s], "`queries` arrived as a single string; treated it as a list of one query"
    if not isinstance(value, list | tuple):
        return [], f"`queries` must be a list of strings, got {type(value).__name__}"
    queries = [q.strip() if isinstance(q, str) else str(q) for q in value if q is not None]
    queries = [q for q in queries if q]
    if len(queries) < len(value):
        note = (note + "; " if note else "") + f"dropped {len(value) - len(queries)} empty sub-queries"
    return queries, note


def one_query(value: Any) -> tuple[str, str]:
    """A single-query tool's `query` -> (the stripped query, "" when unusable; a note when a list was joined)."""
    if isinstance(value, list):
        return " ".join(str(q) for q in value).strip(), "Note: `query` arrived as a list; joined it.\n"
    return (value.strip() if isinstance(value, str) else ""), ""


def surfaced_in(text: str, lookup: Callable[[str], str | None]) -> list[str]:
    """Docids whose corpus-relative path appears in `text` (rg prints `path:line:...`, find prints `./path`)."""
    seen: dict[str, None] = {}
    for tok in _PATH_TOKEN.findall(text):
        tok = tok.removeprefix("./").removeprefix("/workspace/")
        docid = lookup(tok)
        if docid is not None:
            seen[docid] = None
    return list(seen)


def argument_problem(arguments: dict) -> str | None:
    """Why the model's arguments cannot be used as text (naming the argument), or None. Iterative: any depth."""
    for key in arguments:
        if not _is_text(str(key)):
            return f"argument name {ascii(key)} is not valid text (a lone surrogate); send UTF-8 text"
    stack: list[tuple[str, Any]] = [(str(k), v) for k, v in arguments.items()]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if len(value) > MAX_ARGUMENT_CHARS:
                return f"`{where}` is {len(value):,} characters long; at most {MAX_ARGUMENT_CHARS:,} are accepted"
            if not _is_text(value):
                bad = next(c for c in value if 0xD800 <= ord(c) <= 0xDFFF)
                return (
                    f"`{where}` contains a lone surrogate ({ascii(bad)}), which is not a character; "
                    "send the text itself as UTF-8"
                )
        elif isinstance(value, list):
            stack += [(f"{where}[{i}]", v) for i, v in enumerate(value)]
        elif isinstance(value, dict):
            for k, v in value.items():
                if not _is_text(str(k)):
                    return f"a key inside `{where}` is not valid text (a lone surrogate); send UTF-8 text"
                stack.append((f"{where}.{k}", v))
    return None


def _is_text(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class ToolSet:
    """Dispatch from a model's tool call (name + JSON arguments) to a method, turning bad input into text.

    A tool method's keyword-only parameters belong to the caller, never to the model: the model's arguments are
    checked against the other parameters only. `timeout_s` is one: the agent loop passes the time left in the
    trajectory, and a tool that runs a command caps that call's time limit with it (nothing is stored)."""

    tools: dict[str, Callable[..., ToolResult]]
    schemas: list[dict]
    sandbox: Sandbox | None = None  # the bash tools' long-lived sandbox, if the set has one

    def close(self) -> None:
        """End what the tools hold between calls (a long-lived sandbox's bwrap) when their trajectory ends. Left to
        the garbage collector (a tool set is a reference cycle: `tools` holds its bound methods), a sandbox lived
        on until some later collection, which waited for its bwrap inside whatever thread it ran in."""
        if self.sandbox is not None:
            self.sandbox.close()

    def call(self, name: str, arguments: str | dict | None, *, timeout_s: float | None = None) -> ToolResult:
        fn = self.tools.get(name)
        if fn is None:
            return ToolResult(f"error: unknown tool {name!r}; available: {', '.join(self.tools)}", error=True)
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as e:
                return ToolResult(f"error: arguments are not valid JSON ({e.msg} at {e.pos})", error=True)
            except (ValueError, RecursionError) as e:  # a number of 5,000 digits; arrays nested 10,000 deep
                return ToolResult(f"error: arguments cannot be used: {str(e)[:200]}", error=True)
        if not isinstance(arguments, dict):
            return ToolResult("error: arguments must be a JSON object", error=True)
        problem = argument_problem(arguments)
        if problem:
            return ToolResult(f"error: bad arguments for {name}: {problem}", error=True)
        try:
            return self._dispatch(name, fn, arguments, timeout_s)
        except Exception as e:  # a tool bug must not end the trajectory: the model is told, the log keeps the trace
            log.exception("tool %s raised on arguments %.300r", name, arguments)
            return ToolResult(f"error: {name} failed on these arguments ({type(e).__name__}); try others", error=True)

    @staticmethod
    def _dispatch(name: str, fn: Callable[..., ToolResult], arguments: dict, timeout_s: float | None) -> ToolResult:
        sig = inspect.signature(fn)
        callers = {n for n, p in sig.parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
        try:
            sig.replace(parameters=[p for n, p in sig.parameters.items() if n not in callers]).bind(**arguments)
        except TypeError as e:
            return ToolResult(f"error: bad arguments for {name}: {e}", error=True)
        if timeout_s is not None and "timeout_s" in callers:
            return fn(**arguments, timeout_s=timeout_s)
        return fn(**arguments)


def read_in(
    root: Below, path: Any, offset: Any, limit: Any, lookup: Callable[[str], str | None], *, by_line: bool = False
) -> ToolResult:
    """`read` below `root` (regular files reached without a link); `by_line`: the caller's tool takes 1-indexed
    line ranges, and the notes say so."""
    try:
        offset, limit = int(offset), int(limit)
    except (TypeError, ValueError, OverflowError):  # NaN, 1e400 (inf), "ten", a list
        return ToolResult("error: offset and limit must be integers", error=True)
    if offset < 0 or limit < 1:
        return ToolResult("error: offset must be >= 0 and limit >= 1", error=True)
    note = ""
    if limit > MAX_READ_LINES:
        limit, note = MAX_READ_LINES, f"[{'range' if by_line else 'limit'} capped at {MAX_READ_LINES} lines]\n"
    try:
        fd, rel = open_inside(root, path)
        try:
            text = read_numbered(fd, offset, limit, by_line=by_line)
        finally:
            os.close(fd)
    except PathRefused as e:
        return ToolResult(f"error: {e}", error=True)
    except OSError as e:
        return ToolResult(f"error: cannot read {path!r}: {e.strerror}", error=True)
    docid = lookup(rel)
    return ToolResult(note + text, surfaced=(docid,) if docid else ())


def bash_in(
    sandbox: Sandbox, command: Any, lookup: Callable[[str], str | None], timeout_s: float | None = None
) -> ToolResult:
    """Run a model's shell command. With `timeout_s` (the time left), this call's cap is min(the sandbox's cap,
    timeout_s) but at least MIN_COMMAND_S, so a command dies at the trajectory's deadline; the sandbox is not
    changed."""
    if not isinstance(command, str) or not command.strip():
        return ToolResult("error: `command` must be a non-empty string", error=True)
    if "\x00" in command:
        return ToolResult("error: the command contains a NUL character", error=True)
    limits = sandbox.limits
    if timeout_s is not None:
        limits = dataclasses.replace(limits, timeout_s=max(MIN_COMMAND_S, min(limits.timeout_s, timeout_s)))
    try:
        res = sandbox.run(command, limits)
    except OSError as e:  # e.g. E2BIG: a command longer than the kernel's argument limit
        return ToolResult(f"error: could not start the command: {e.strerror or e}", error=True)
    return ToolResult(
        res.render(limits.timeout_s), surfaced=tuple(surfaced_in(res.output, lookup)), phases=res.phases or None
    )


def score_text(score: float) -> str:
    """A hit's score as shown: two decimals for BM25 and cosine, four significant digits for the small fused
    scores of reciprocal-rank fusion (1/61 = 0.0164), which two decimals would show as equal."""
    return f"{score:.2f}" if abs(score) >= 0.1 else f"{score:.4g}"


def search_into(index: SearchIndex, ws: Workspace, queries: Any, k: int = 1000, preview: int = 10) -> ToolResult:
    """RISE `search`: the retriever's top-k per sub-query (bm25, dense or hybrid: rise_batch.index.retriever), their
    union linked into `ws`, a top-`preview` listing each."""
    subs, note = coerce_queries(queries)
    if not subs:
        return ToolResult(f"error: give at least one non-empty query. {note}".strip(), error=True)
    before = len(ws)
    t0 = time.perf_counter()
    hits_list = index.search(subs, k)
    search_s, link_s, preview_s = time.perf_counter() - t0, 0.0, 0.0
    # the previews' files start coming from disk while the union is linked (the same inodes as the corpus files)
    rel = ws.store.relpath
    prefetch_heads(ws.store.docs, [rel[d] for hits in hits_list for d in hits.docids[:preview] if d in rel])
    prefetch_s = time.perf_counter() - t0 - search_s
    out = [f"Searched {len(subs)} quer{'y' if len(subs) == 1 else 'ies'} (top {k} each)."]
    if note:
        out.append(f"Note: {note}.")
    surfaced: dict[str, None] = {}
    new_all: list[str] = []
    refused: dict[str, str] = {}
    missing = 0
    call = ws.new_call()
    for i, (q, hits) in enumerate(zip(subs, hits_list, strict=True), 1):
        t0 = time.perf_counter()
        added = ws.add(hits.docids, call)
        t1 = time.perf_counter()
        link_s += t1 - t0
        new_all += added.new
        missing += len(added.missing)
        refused.update(added.refused)
        out.append(f'\nQuery {i}: "{q}" -- {len(hits.docids):,} matched, {len(added.new):,} new')
        for rank, (docid, score) in enumerate(zip(hits.docids[:preview], hits.scores, strict=False), 1):
            arrival = ws.arrivals.get(docid)
            if arrival is None:
                why = (
                    f"refused: its file {refused[docid]}"
                    if docid in refused
                    else "file missing from the docs directory"
                )
                out.append(f"  {rank:>2}. [{score_text(score)}] (docid {docid}: {why})")
                continue
            surfaced[docid] = None
            out.append(f"  {rank:>2}. [{score_text(score)}] {arrival.relpath}")
            out.append(f"      {snippet_line(ws.files, arrival.relpath)}")
        preview_s += time.perf_counter() - t1
    if missing:
        out.append(f"\n[{missing} retrieved documents have no file in the docs directory and were skipped]")
    if refused:
        out.append(
            f"\n[{len(refused)} retrieved documents were refused and skipped: their files are links or not regular "
            "files (the log names them)]"
        )
    out.append(
        f"\nWorkspace: {len(ws):,} documents (+{len(ws) - before:,} this call). "
        "Explore it with bash (rg, grep, ls, ...) and read."
    )
    phases = {"search_ms": search_s, "prefetch_ms": prefetch_s, "link_ms": link_s, "preview_ms": preview_s}
    phases = {name: round(s * 1000, 2) for name, s in phases.items()}
    return ToolResult("\n".join(out), surfaced=tuple(surfaced), retrieved=tuple(new_all), phases=phases)


class RiseTools(ToolSet):
    """search + bash + read over one query's workspace (RISE on structured files, RISE-BM25 on originals).

    `lines`: the files a view's entries point at (RISE-TOC: the workspace holds TOC-only files, and `read` opens
    the structured file of a relpath in the workspace); None: `read` opens the workspace's own file."""

    def __init__(
        self,
        index: SearchIndex,
        workspace: Workspace,
        *,
        k: int = 1000,
        preview: int = 10,
        limits: SandboxLimits | None = None,
        allow_unsandboxed: bool = False,
        lines: DocStore | None = None,
    ) -> None:
        self.index, self.ws, self.k, self.preview, self.lines = index, workspace, k, preview, lines
        self.sandbox = Sandbox(workspace.files_dir, limits, allow_unsandboxed=allow_unsandboxed)
        lim = self.sandbox.limits
        self.tools = {"search": self.search, "bash": self.bash, "read": self.read}
        self.schemas = [
            schemas.rise_search_schema(k, preview),
            schemas.bash_schema(lim.timeout_s, lim.max_output_chars),
            schemas.read_schema(MAX_READ_LINES) if lines is None else schemas.read_lines_schema(MAX_READ_LINES),
        ]

    def search(self, queries: Any = None, query: Any = None) -> ToolResult:
        if queries is None and query is not None:  # models trained on single-query tools send `query`
            res = search_into(self.index, self.ws, query, self.k, self.preview)
            return res._replace(text="Note: read `query` as `queries`.\n" + res.text)
        return search_into(self.index, self.ws, queries, self.k, self.preview)

    def bash(self, command: Any, *, timeout_s: float | None = None) -> ToolResult:
        return bash_in(self.sandbox, command, self.ws.by_relpath.get, timeout_s)

    def read(self, path: Any, offset: Any = 0, limit: Any = MAX_READ_LINES) -> ToolResult:
        if self.lines is None:
            return read_in(self.ws.files, path, offset, limit, self.ws.by_relpath.get)
        try:  # only a document search brought into the workspace, as for the workspace's own files
            rel = agent_relpath(path)
        except PathRefused as e:
            return ToolResult(f"error: {e}", error=True)
        if rel not in self.ws.by_relpath:
            return ToolResult(
                f"error: no such file in the workspace: {rel!r} (list files with bash: ls, rg -l)", error=True
            )
        return read_in(self.lines.docs, rel, offset, limit, self.ws.by_relpath.get)


class DciTools(ToolSet):
    """DCI baseline: bash + read over the whole corpus tree, read-only, no retriever."""

    def __init__(self, store: DocStore, *, limits: SandboxLimits | None = None, allow_unsandboxed: bool = False):
        self.store = store
        self.sandbox = Sandbox(store.corpus_dir, limits, allow_unsandboxed=allow_unsandboxed)
        lim = self.sandbox.limits
        self.tools = {"bash": self.bash, "read": self.read}
        self.schemas = [
            schemas.bash_schema(lim.timeout_s, lim.max_output_chars, what="the corpus directory"),
            schemas.read_schema(MAX_READ_LINES, what="corpus directory"),
        ]

    def bash(self, command: Any, *, timeout_s: float | None = None) -> ToolResult:
        return bash_in(self.sandbox, command, self.store.docid, timeout_s)

    def read(self, path: Any, offset: Any = 0, limit: Any = MAX_READ_LINES) -> ToolResult:
        return read_in(self.store.docs, path, offset, limit, self.store.docid)


def as_text(raw: bytes) -> str:
    """A document's bytes as the retrieval tools show them: UTF-8 (invalid bytes replaced) with universal
    newlines, as `Path.read_text` gave them before documents were opened safely. (A snippet's head read may end
    inside a character; the snippet is cut well before that end.)"""
    text = raw.decode("utf-8", errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


class RetrievalTools(ToolSet):
    """Retrieval-agent baseline (BrowseComp-Plus style): BM25 top-k with ~512-token snippets + get_document."""

    def __init__(
        self, index: SearchIndex, store: DocStore, *, k: int = 5, snippet_tokens: int = 512, max_doc_chars: int = 0
    ) -> None:
        self.index, self.store, self.k = index, store, k
        self.snippet_chars = snippet_tokens * SNIPPET_CHARS_PER_TOKEN
        self.max_doc_chars = max_doc_chars  # 0: whole documents, as the reference harness returns them
        self.seen: set[str] = set()
        self.tools = {"search": self.search, "get_document": self.get_document}
        self.schemas = [schemas.retrieval_search_schema(k), schemas.get_document_schema()]

    def search(self, query: Any) -> ToolResult:
        query, note = one_query(query)
        if not query:
            return ToolResult("error: `query` must be a non-empty string", error=True)
        hits = self.index.search([query], self.k)[0]
        out = [note + f'Top {len(hits.docids)} for "{query}":'] if hits.docids else [note + "No results."]
        head = SNIPPET_HEAD_BYTES + 4 * self.snippet_chars  # the frontmatter, then the snippet's characters
        for rank, (docid, score) in enumerate(zip(hits.docids, hits.scores, strict=True), 1):
            try:
                raw = self.store.read(docid, head)
                snippet = leading_text(as_text(raw), self.snippet_chars) if raw else ""
            except NotADocument as e:
                log.warning("%s", e)
                snippet = f"(refused: the document's file {e.what})"
            out.append(f"\n[{rank}] docid: {docid}  score: {score:.2f}\n{snippet}")
        new = tuple(d for d in hits.docids if d not in self.seen)
        self.seen.update(new)
        return ToolResult("\n".join(out), surfaced=tuple(hits.docids), retrieved=new)

    def get_document(self, docid: Any) -> ToolResult:
        docid = str(docid).strip() if docid is not None else ""
        try:
            raw = self.store.read(docid)
        except NotADocument as e:
            log.warning("%s", e)
            return ToolResult(f"error: document {docid!r} cannot be read: its file {e.what}", error=True)
        if raw is None:
            return ToolResult(f"error: no document with docid {docid!r}", error=True)
        text = as_text(raw)
        if self.max_doc_chars and len(text) > self.max_doc_chars:
            cut = len(text) - self.max_doc_chars
            text = text[: self.max_doc_chars] + f"\n[document truncated: {cut:,} more characters]"
        return ToolResult(f"docid: {docid}\n{text}", surfaced=(docid,))
