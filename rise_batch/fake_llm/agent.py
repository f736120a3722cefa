"""The fake server as an agent: a scripted, deterministic policy for requests that carry `tools`.

It plays the trajectory a diligent model would, with whatever tools the request offers: search with the question's
distinctive words, grep (rg) for its key term, read the head of the matching file (its table of contents), read the
TOC range holding the hit (or, when only TOC entry lines name the term, as in TOC-only files, read that entry's
range; or, offered a search of sections and a read by line range, read the listed section that names the key term),
then answer from the text it read in the `Explanation / Exact Answer / Confidence`
format. The answer therefore only comes out right when the tools really work end to end.

Behaviours that exercise budgets and failures are chosen per query by markers in the question text, e.g.
`[fake:never-answer]`, or for the whole server by `AgentResponder(default=...)`:

    answer            the scripted trajectory (default)
    never-answer      keeps calling tools forever (for max_calls)
    hang[=S]          the model call does not return for S seconds (default 600)
    hang-at=N         the model call of turn N (0: the first) does not return for 600 s (a process killed with
                      calls in flight: the calls before it are answered and paid)
    sleep=S           every model call takes S seconds longer
    tool-sleep=S      first runs `sleep S` in bash (a slow tool)
    calls=N           pads the trajectory with grep calls until N tool turns were made
    error             answers the first call with HTTP 400 (not retryable: an api_error)
    raw-call=TOOL:ARGS  first calls TOOL with the arguments string ARGS exactly as written (a JSON escape such as
                      \ud800 stays an escape on the wire), then plays the scripted trajectory
    overflow          answers with HTTP 400 context_length_exceeded
    say[=N]           writes a sentence before each tool call (padded to N characters when N is given), as a model
                      that thinks aloud does; off by default, so the scripted token counts stay as they were
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any, NamedTuple

from rise_batch.fake_llm.http import BadRequest
from rise_batch.fake_llm.request import ChatRequest

_MARKER = re.compile(r"\[fake:([a-z-]+)(?:=([^\]]*))?\]")
_QUOTED = re.compile(r"[\"'\u201c\u2018]([^\"'\u201d\u2019]{3,60})[\"'\u201d\u2019]")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9-]{3,}")
_RG_LINE = re.compile(r"^(?:\./)?([^\s:][^:\n]*\.txt):(\d+):(.*)$", re.MULTILINE)
_NOT_BODY = re.compile(r"^(title:|url:|- L\d+\u2013|## |---)")
_PREVIEW_PATH = re.compile(r"^\s+\d+\. \[[\d.]+\] (\S.*\.txt)$", re.MULTILINE)
_TOC_LINE = re.compile(r"- L(\d+)\u2013(\d+): ")
_TOC_ENTRY = re.compile(r"^\s*\d+\t- L(\d+)\u2013(\d+): ", re.MULTILINE)
_NUMBERED = re.compile(r"^\s*(\d+)\t(.*)$", re.MULTILINE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_DOCID = re.compile(r"^\[\d+\] docid: (\S+)", re.MULTILINE)
_SECTION = re.compile(r"^\[\d+\] (\S.*?\.txt)  L(\d+)\u2013(\d+)  ", re.MULTILINE)
_STOP = frozenset(
    "what which when where who whom whose with from that this these those there their about into over under "
    "after before during between through does did have has had been being were was than then them they also "
    "such some most more many much very only other article name named called year years first last said says "
    "tell told know".split()
)


class Step(NamedTuple):
    tool: str
    arguments: dict[str, Any]
    output: str


def markers(question: str) -> dict[str, str]:
    return {m.group(1): (m.group(2) or "") for m in _MARKER.finditer(question)}


def key_term(question: str) -> str:
    """The phrase to grep for: a quoted phrase if the question has one, else its longest distinctive word."""
    text = _MARKER.sub(" ", question)
    quoted = _QUOTED.search(text)
    if quoted:
        return quoted.group(1).strip()
    words = distinctive_words(text)
    return max(words, key=len) if words else "the"


def distinctive_words(question: str, n: int = 6) -> list[str]:
    seen: dict[str, None] = {}
    for w in _WORD.findall(_MARKER.sub(" ", question)):
        if w.lower() not in _STOP:
            seen.setdefault(w, None)
    return sorted(seen, key=len, reverse=True)[:n]


def _question(request: ChatRequest) -> str:
    for m in request.messages:
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            return m["content"].removeprefix("QUESTION:").strip()
    return ""


def _history(messages: list[dict[str, Any]]) -> list[Step]:
    outputs = {m.get("tool_call_id"): m.get("content") or "" for m in messages if m.get("role") == "tool"}
    steps = []
    for m in messages:
        for c in m.get("tool_calls") or []:
            fn = c.get("function", {})
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except json.JSONDecodeError:
                args = {}
            steps.append(Step(fn.get("name", ""), args if isinstance(args, dict) else {}, outputs.get(c.get("id"), "")))
    return steps


def _tool_params(request: ChatRequest) -> dict[str, set[str]]:
    out = {}
    for t in request.body.get("tools") or []:
        fn = t.get("function", t) if isinstance(t, dict) else {}
        out[fn.get("name", "")] = set((fn.get("parameters") or {}).get("properties") or {})
    return out


def _rg(term: str) -> str:
    return f"rg -n -i -m 4 -F --sort path {_shell_quote(term)} | head -50"


def _shell_quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def _grep_hit(steps: list[Step], term: str) -> tuple[str, int] | None:
    """The grep hit to follow: in the best-ranked previewed file, else in a file named for the term, else the first."""
    hits: dict[str, int] = {}
    for s in steps:
        if s.tool == "bash":
            for m in _RG_LINE.finditer(s.output):
                if not _NOT_BODY.match(m.group(3)):  # frontmatter and TOC lines are not evidence
                    hits.setdefault(m.group(1), int(m.group(2)))
    return _preferred(steps, hits, term)


def _toc_hit(steps: list[Step], term: str) -> tuple[str, tuple[int, int]] | None:
    """A grep hit on a TOC entry line (TOC-only files hold nothing else): the file and the entry's line range."""
    hits: dict[str, tuple[int, int]] = {}
    for s in steps:
        if s.tool == "bash":
            for m in _RG_LINE.finditer(s.output):
                entry = _TOC_LINE.match(m.group(3))
                if entry:
                    hits.setdefault(m.group(1), (int(entry.group(1)), int(entry.group(2))))
    return _preferred(steps, hits, term)


def _preferred(steps: list[Step], hits: dict[str, Any], term: str) -> tuple[str, Any] | None:
    if not hits:
        return None
    for path in (m for s in steps if s.tool == "search" for m in _PREVIEW_PATH.findall(s.output)):
        if path in hits:
            return path, hits[path]
    named = term.lower().replace(" ", "_")
    path = next((p for p in hits if named in p.lower()), next(iter(hits)))
    return path, hits[path]


def _toc_range(output: str, line: int) -> tuple[int, int] | None:
    """The TOC entry (start, end) holding `line`, from a read of the file head."""
    for m in _TOC_ENTRY.finditer(output):
        start, end = int(m.group(1)), int(m.group(2))
        if start <= line <= end:
            return start, end
    return None


def _section_to_read(output: str, term: str) -> tuple[str, int, int] | None:
    """From a section search's listing: the first section whose entry names `term`, else the first one."""
    found = list(_SECTION.finditer(output))
    if not found:
        return None
    ends = [m.start() for m in found[1:]] + [len(output)]
    pick = next(
        (m for m, e in zip(found, ends, strict=True) if term.lower() in output[m.start() : e].lower()), found[0]
    )
    return pick.group(1), int(pick.group(2)), int(pick.group(3))


def answer_text(term: str, steps: list[Step]) -> str:
    """The final reply, quoting the line of the read text that holds the term."""
    needle = term.lower()
    for s in reversed(steps):
        if s.tool not in ("read", "get_document"):
            continue
        lines = [m.group(2) for m in _NUMBERED.finditer(s.output)] or s.output.split("\n")
        for line in lines:
            low = line.lower()
            if needle in low and not line.lstrip().startswith(("- L", "## ", "title:", "url:", "docid:")):
                sentence = next((x for x in _SENTENCE.split(line) if needle in x.lower()), line)
                exact = " ".join(sentence.split()[:40]).strip(" .,;:")  # the sentence that names the term
                where = s.arguments.get("path") or s.arguments.get("docid") or "the document"
                return f"Explanation: {where} says: {line.strip()[:300]}\nExact Answer: {exact}\nConfidence: 85%"
    return f"Explanation: no document I read mentions {term!r}.\nExact Answer: unknown\nConfidence: 5%"


def next_action(question: str, tools: dict[str, set[str]], steps: list[Step], behaviour: dict[str, str]):
    """("call", tool, arguments) or ("answer", text): the scripted policy, a pure function of the history."""
    term = key_term(question)
    words = distinctive_words(question)
    done = {s.tool for s in steps}
    slept = any(s.arguments.get("command", "").startswith("sleep") for s in steps)
    if "tool-sleep" in behaviour and "bash" in tools and not slept:
        return "call", "bash", {"command": f"sleep {float(behaviour['tool-sleep'] or 600):g}"}
    if "search" in tools and "search" not in done:
        if "queries" in tools["search"]:
            return "call", "search", {"queries": [" ".join(words[:4]) or term, term]}
        return "call", "search", {"query": " ".join(words[:4]) or term}
    if "get_document" in tools:
        if "get_document" not in done:
            out = next(s.output for s in reversed(steps) if s.tool == "search")
            docids = _DOCID.findall(out)
            blocks = re.split(r"^\[\d+\] docid: ", out, flags=re.MULTILINE)[1:]
            pick = next((d for d, b in zip(docids, blocks, strict=False) if term.lower() in b.lower()), None)
            if pick or docids:
                return "call", "get_document", {"docid": pick or docids[0]}
    elif "start" in tools.get("read", ()):  # sections by line range (snippet-toc)
        if not any(s.tool == "read" for s in steps):
            pick = _section_to_read(next(s.output for s in reversed(steps) if s.tool == "search"), term)
            if pick:
                return "call", "read", {"path": pick[0], "start": pick[1], "end": pick[2]}
    elif "bash" in tools:
        if not any(s.tool == "bash" and not s.arguments.get("command", "").startswith("sleep") for s in steps):
            return "call", "bash", {"command": _rg(term)}
        reads = [s for s in steps if s.tool == "read"]
        hit = _grep_hit(steps, term)
        toc = _toc_hit(steps, term) if hit is None and "read" in tools else None
        if toc is not None and not reads:  # only TOC entry lines name the term (TOC-only files): read that range
            path, (start, end) = toc
            return "call", "read", {"path": path, "offset": start - 1, "limit": end - start + 1}
        path = hit[0] if hit else None
        if path is None:
            previews = [m for s in steps if s.tool == "search" for m in _PREVIEW_PATH.findall(s.output)]
            path = previews[0] if previews else None
        if path is not None and "read" in tools and toc is None:
            if not reads:
                return "call", "read", {"path": path, "offset": 0, "limit": 40}
            if len(reads) == 1:
                line = hit[1] if hit else 1
                rng = _toc_range(reads[0].output, line)
                start, end = rng if rng else (max(1, line - 5), line + 15)
                return "call", "read", {"path": path, "offset": start - 1, "limit": end - start + 1}
    pad = int(behaviour.get("calls") or 0)
    if "never-answer" in behaviour or len(steps) < pad:
        if "bash" in tools:
            return "call", "bash", {"command": f"rg -c -i -F {_shell_quote(term)} | head -5"}
        name = next(iter(tools))
        arg = "queries" if "queries" in tools[name] else next(iter(tools[name]), "query")
        return "call", name, {arg: [term] if arg == "queries" else term}
    return "answer", answer_text(term, steps)


class AgentResponder:
    """Answers chat requests that offer tools, with the scripted policy above."""

    name = "agent"

    def __init__(self, default: str = "answer", stop: threading.Event | None = None) -> None:
        self.default = markers(f"[fake:{default}]") if default and default != "answer" else {}
        self.stop = stop or threading.Event()  # once set, scripted hangs and sleeps are no longer waited

    def matches(self, request: ChatRequest) -> bool:
        return bool(request.body.get("tools"))

    def delay_s(self, request: ChatRequest) -> float:
        """How long this request waits before its answer (`hang`, `sleep`): yielded to the HTTP engine as a wait
        (chat.complete), never slept here, since the asyncio engine answers every request on one thread."""
        if self.stop.is_set():
            return 0.0
        behaviour = {**self.default, **markers(_question(request))}
        hang = float(behaviour["hang"] or 600) if "hang" in behaviour else 0.0
        if "hang-at" in behaviour and sum(m.get("role") == "assistant" for m in request.messages) == int(
            behaviour["hang-at"] or 0
        ):
            hang = 600.0
        return hang + (float(behaviour["sleep"]) if behaviour.get("sleep") else 0.0)

    def respond(self, request: ChatRequest) -> dict[str, Any]:
        question = _question(request)
        behaviour = {**self.default, **markers(question)}
        turn = sum(1 for m in request.messages if m.get("role") == "assistant")
        if "error" in behaviour and turn == int(behaviour["error"] or 0):
            raise BadRequest("fake-llm: scripted invalid request for this query")
        if "overflow" in behaviour:
            raise BadRequest(
                "This model's maximum context length is 400000 tokens; your messages are longer "
                "(context_length_exceeded, fake-llm)"
            )
        steps = _history(request.messages)
        if "raw-call" in behaviour:
            tool, _, raw = behaviour["raw-call"].partition(":")
            if turn == 0:
                call = {"id": f"call_{request.key}_0", "type": "function", "function": {"name": tool, "arguments": raw}}
                return {"role": "assistant", "content": None, "tool_calls": [call]}
            steps = steps[1:]  # the scripted policy does not count the raw call
        kind, *rest = next_action(question, _tool_params(request), steps, behaviour)
        if kind == "answer":
            return {"role": "assistant", "content": rest[0]}
        name, args = rest
        call = {
            "id": f"call_{request.key}_{turn}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
        }
        return {"role": "assistant", "content": said(behaviour, question, turn, name), "tool_calls": [call]}


def said(behaviour: dict[str, str], question: str, turn: int, tool: str) -> str | None:
    """What the model writes before a tool call under `say[=N]` (None without it): names the turn, the tool and
    the key term, padded with dots to N characters."""
    if "say" not in behaviour:
        return None
    text = f"Turn {turn + 1}: I call {tool} to look for {key_term(question)!r}."
    return text.ljust(int(behaviour["say"] or 0), ".")
