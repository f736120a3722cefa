"""Interaction-space metrics of one trajectory: when the gold documents entered the workspace, when the agent was
shown them, whether it read them, and how much it read (pure: no I/O).

A *step* is a tool call, numbered by its index in the trajectory file's `steps` list (0-based, as `steps[i]`).
Since the engine records, per step, the docids the call showed (`surfaced`), how many documents it linked into
the workspace (`added`) and how many lines its whole output had (`output_lines`); the stored output itself is
cut to its first characters (agent/loop.py STEP_OUTPUT_CHARS), so counts read from that text are lower bounds.
The trajectory's `gold_paths` (docid -> path) lets a bash command be matched to a gold document.

What counts, tool by tool:
- `search`: the documents it added are the next `added` docids of `retrieved_docids` (the search union, in
  arrival order); its preview shows the docids in `surfaced`. `workspace_growth` is [step, workspace size] after
  each search call.
- `read` (and `get_document`): reads the document it names (`surfaced`, else a gold path given as `path`, else the
  `docid` argument); lines read = the `[lines A-B` trailer when stored, else the output's numbered lines.
- `bash`: the command is split as shlex splits it (eval/shell_words.py), into simple commands at `|`, `;`, `&&`,
  `||`. Of those:
  * `cat`, `head`, `tail`, `sed`, `awk`, `nl`, `tac`, `less`, `more` with file operands read those files (sed's
    and awk's first operand is their script unless -e/-f gives it; `head -n 20`'s 20 is an option's value); the
    lines read are the call's output lines, credited to the gold when every file read is gold;
  * `rg`, `grep` (not with -l/-L/-c/-q/--files...) read their hits: every output line, credited to a gold document
    when it starts with its path (`path:12:...`), or when the search names that one file alone;
  * a path is matched as written relative to the workspace (`./` and `/workspace/` stripped; a glob is matched
    against the gold paths). After a `cd`, in a subshell, through `xargs`, `$(...)` or a variable, paths cannot
    be known: such reads do not count. Every other command (ls, find, wc, python...) is no read.
- TOC lines seen (`toc_lines_read`): entries `- L<a>–<b>: ` (read, rg, cat output) or `| L<a>–<b>: ` (a search
  preview) in the stored outputs of every step.
- `gold_surfaced_step`: the first step that showed a gold document (a preview, an rg hit, a read of it);
  `gold_read`: whether any step read lines of one.
Gold fields are None when the query has no gold documents, and for trajectories written before the per-step
records (no `surfaced` in their steps): there, when a gold document arrived or was shown cannot be told.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Collection, Sequence
from typing import Any

from rise_batch.eval.shell_words import shell_words

READERS = frozenset({"cat", "head", "tail", "sed", "awk", "nl", "tac", "less", "more"})
SEARCHERS = frozenset({"rg", "grep", "egrep", "fgrep"})
_SCRIPT_FIRST = frozenset({"sed", "awk"})
_NAMES_ONLY = frozenset({"-l", "-L", "-c", "-q", "--count", "--files", "--files-with-matches", "--quiet"})
_NAMES_ONLY |= frozenset({"--files-without-match", "--count-matches", "--type-list"})
# options whose value is the next word (so that word is no file)
_VALUED = {
    "head": {"-n", "-c"},
    "tail": {"-n", "-c"},
    "sed": {"-e", "-f", "-l"},
    "awk": {"-f", "-v", "-F"},
    "nl": {"-b", "-n", "-s", "-v", "-w", "-i"},
    "rg": {
        "-e",
        "-f",
        "-m",
        "-A",
        "-B",
        "-C",
        "-g",
        "-t",
        "-T",
        "-M",
        "-j",
        "-E",
        "--glob",
        "--type",
        "--regexp",
        "--max-count",
        "--context",
        "--after-context",
        "--before-context",
        "--max-columns",
        "--file",
    },
    "grep": {"-e", "-f", "-m", "-A", "-B", "-C", "--regexp", "--file", "--max-count", "--context"},
}
_SPLIT = frozenset({"|", "||", "&", "&&", ";", ";;", "\n", "(", ")"})
_OPERATOR_START = frozenset("<>&|;()\n")  # a token that starts otherwise is a word
_REDIRECTION = re.compile(r"[<>&]*[<>][<>&]*")  # only <, > and &, with a < or a >
_SEPARATOR = re.compile(r"[|&;()]*")
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=")
_TOC_ENTRY = re.compile(r"(?:- |\| )L\d+[\u2013-]\d+: ")
_READ_SPAN = re.compile(r"^\[lines (\d+)-(\d+)", re.MULTILINE)
_NUMBERED = re.compile(r"^\s*\d+\t", re.MULTILINE)
_TRAILER = re.compile(r"^\[(exit code|killed|output truncated)")
_ADDED_TEXT = re.compile(r"\(\+([\d,]+) this call\)")
FIELDS = (  # what interaction() returns, each a key of a per-query row (metrics.per_query_rows)
    "gold_in_workspace_step",
    "gold_surfaced_step",
    "gold_read",
    "gold_lines_read",
    "lines_read",
    "toc_lines_read",
    "search_calls",
    "workspace_docs_final",
    "gold_surfaced_steps",
    "gold_read_steps",
    "workspace_growth",
)


def interaction(trajectory: dict[str, Any], gold: Collection[str]) -> dict[str, Any]:
    """The interaction-space figures of one trajectory against its gold docids (rules: module docstring)."""
    steps = [s for s in trajectory.get("steps") or () if isinstance(s, dict)]
    gold = set(gold)
    paths = {_norm(p): d for d, p in (trajectory.get("gold_paths") or {}).items() if d in gold}
    traced = all("surfaced" in s for s in steps)
    retrieved = list(trajectory.get("retrieved_docids") or ())
    pos = ws = search_calls = lines_read = toc_lines = gold_lines = 0
    in_ws_step = None
    surfaced_steps: list[int] = []
    read_steps: list[int] = []
    growth: list[list[int]] = []
    for i, s in enumerate(steps):
        out = str(s.get("output") or "")
        if "- L" in out or "| L" in out:  # a plain search for the entries' start: most outputs have none
            toc_lines += len(_TOC_ENTRY.findall(out))
        added = _added(s, out)
        if in_ws_step is None and gold.intersection(retrieved[pos : pos + added]):
            in_ws_step = i
        pos, ws = pos + added, ws + added
        if s.get("tool") == "search":
            search_calls += 1
            growth.append([i, ws])
        n, n_gold, docs_read = _lines_read(s, out, paths, gold)
        lines_read += n
        gold_lines += n_gold
        read_gold = bool(n_gold or gold.intersection(docs_read))
        if read_gold:
            read_steps.append(i)
        if read_gold or gold.intersection(s.get("surfaced") or ()):  # reading a document shows it
            surfaced_steps.append(i)
    known = bool(gold) and traced
    final = trajectory.get("workspace_docs")
    return {
        "gold_in_workspace_step": in_ws_step if known else None,
        "gold_surfaced_step": (surfaced_steps[0] if surfaced_steps else None) if known else None,
        "gold_read": bool(read_steps) if known else None,
        "gold_lines_read": gold_lines if known else None,
        "lines_read": lines_read,
        "toc_lines_read": toc_lines,
        "search_calls": search_calls,
        "workspace_docs_final": int(final) if isinstance(final, int | float) else ws,
        "gold_surfaced_steps": surfaced_steps if known else [],
        "gold_read_steps": read_steps if known else [],
        "workspace_growth": growth,
    }


def _added(step: dict[str, Any], out: str) -> int:
    """Documents the step linked into the workspace: the recorded count, else a search output's `(+N this call)`."""
    added = step.get("added")
    if isinstance(added, int):
        return added
    m = _ADDED_TEXT.search(out) if step.get("tool") == "search" else None
    return int(m.group(1).replace(",", "")) if m else 0


def _content_lines(step: dict[str, Any], out: str) -> int:
    """Lines of the whole output that are the command's own (not the sandbox's `[exit code: 0]` notes)."""
    if out.startswith(("(no output)", "error:")):
        return 0
    lines = out.split("\n")
    notes = sum(1 for line in lines if _TRAILER.match(line))
    total = step.get("output_lines")
    if not isinstance(total, int):
        return len(lines) - notes
    return max(total - (notes if len(lines) >= total else max(notes, 1)), 0)  # a cut text lost its note


def _lines_read(step: dict[str, Any], out: str, paths: dict[str, str], gold: set[str]) -> tuple[int, int, set[str]]:
    """(lines read, of them lines of gold documents, gold docids read) by one step."""
    tool, args = step.get("tool"), step.get("arguments")
    args = args if isinstance(args, dict) else {}
    if tool in ("read", "get_document"):
        if out.startswith(("error:", "[empty file", "[offset", "[start")):
            return 0, 0, set()
        doc = (step.get("surfaced") or [None])[0] or paths.get(_norm(str(args.get("path", ""))))
        doc = doc or (str(args["docid"]) if tool == "get_document" and "docid" in args else None)
        span, total = _READ_SPAN.search(out) if "[lines " in out else None, step.get("output_lines")
        if span:
            n = int(span.group(2)) - int(span.group(1)) + 1
        elif isinstance(total, int):  # the numbered lines, less the trailer (and a leading "[... capped" note)
            n = max(total - 1 - out.startswith("["), 0)
        else:
            n = len(_NUMBERED.findall(out)) if tool == "read" else max(len(out.split("\n")) - 1, 0)
        return n, n if doc in gold else 0, {doc} if doc in gold and n else set()
    if tool != "bash" or not isinstance(args.get("command"), str):
        return 0, 0, set()
    return _bash_lines(args["command"], step, out, paths)


def _bash_lines(command: str, step: dict[str, Any], out: str, paths: dict[str, str]) -> tuple[int, int, set[str]]:
    files_read: list[str] = []
    searched: list[list[str]] = []
    for words in _simple_commands(command):
        prog = words[0].rsplit("/", 1)[-1]
        if prog in READERS:
            files_read += _operands(prog, words[1:])
        elif prog in SEARCHERS and not any(w in _NAMES_ONLY or _short_flag(w, "lLcq") for w in words[1:]):
            searched.append(_operands("grep" if prog != "rg" else "rg", words[1:], pattern=True))
    n = _content_lines(step, out)
    if not n:
        return 0, 0, set()
    if files_read:
        golds = [_gold_of(f, paths) for f in files_read]
        if all(golds):
            return n, n, set(golds)  # type: ignore[arg-type]
        return n, 0, {g for g in golds if g}
    if not searched:
        return 0, 0, set()
    if len(searched) == 1 and len(searched[0]) == 1 and (doc := _gold_of(searched[0][0], paths)):
        return n, n, {doc}
    gold_lines, docs = 0, set()
    for line in out.splitlines():
        for path, doc in paths.items():
            if line.removeprefix("./").startswith((path + ":", path + "-")):
                gold_lines += 1
                docs.add(doc)
    return n, gold_lines, docs


@functools.lru_cache(maxsize=65536)
def _simple_commands(command: str) -> tuple[tuple[str, ...], ...]:
    """The simple commands of a shell line (words, env assignments dropped); () when it does not tokenize. Parsed
    once per distinct command (agents run the same command again and again), every token looked at once."""
    tokens = shell_words(command)  # shlex's split, fast (eval/shell_words.py)
    if tokens is None:  # unbalanced quotes
        return ()
    out: list[tuple[str, ...]] = []
    cur: list[str] = []
    skip = False
    for tok in [*tokens, ";"]:
        if skip:
            skip = False
        elif tok and tok[0] not in _OPERATOR_START:  # a word (the common case): no operator starts so
            if cur or not _ASSIGNMENT.match(tok):
                cur.append(tok)
        elif _REDIRECTION.fullmatch(tok):  # a redirection: it and its target are no operands
            skip = True
            if cur and cur[-1].isdigit():
                cur.pop()  # the 2 of 2>/dev/null
        elif tok in _SPLIT or _SEPARATOR.fullmatch(tok):  # (an empty word, '' quoted, separates too)
            if cur:
                out.append(tuple(cur))
            cur = []
        elif cur or not _ASSIGNMENT.match(tok):
            cur.append(tok)
    if any(w[0] == "cd" for w in out):  # later relative paths are relative to somewhere unknown
        out = out[: next(i for i, w in enumerate(out) if w[0] == "cd")]
    return tuple(out)


def _short_flag(word: str, letters: str) -> bool:
    return word.startswith("-") and not word.startswith("--") and any(c in word[1:] for c in letters)


def _operands(prog: str, words: Sequence[str], pattern: bool = False) -> list[str]:
    """The file operands among a command's words (option values, a sed/awk script or a search pattern skipped)."""
    valued = _VALUED.get(prog, set())
    script_given = pattern is False and prog not in _SCRIPT_FIRST
    ops, skip = [], False
    for w in words:
        if skip:
            skip = False
        elif w == "--":
            continue
        elif w.startswith("-") and len(w) > 1:
            skip = w in valued
            script_given = script_given or w in ("-e", "-f", "--regexp", "--file", "--expression")
        elif not script_given and (pattern or prog in _SCRIPT_FIRST):
            script_given = True  # the first operand is the script / pattern
        else:
            ops.append(w)
    return ops


def _norm(path: str) -> str:
    return path.strip().removeprefix("/workspace/").removeprefix("./")


def _gold_of(operand: str, paths: dict[str, str]) -> str | None:
    path = _norm(operand)
    if path in paths:
        return paths[path]
    if any(c in path for c in "*?["):
        return next((d for p, d in paths.items() if fnmatch.fnmatchcase(p, path)), None)
    return None
