"""OpenAI function-tool schemas for each system's tool set (Chat Completions form; `as_responses` converts).

The descriptions are the agent's only manual, so they state the limits the tools really enforce (K, preview
size, output cap, time cap, read limit); they are built from the same numbers the tools are given.
"""

from __future__ import annotations

PATH_PROPERTY = {"type": "string", "description": "relative path, e.g. en.wikipedia.org/Lyon.txt"}


def _tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


def rise_search_schema(k: int = 1000, preview: int = 10) -> dict:
    return _tool(
        "search",
        f"BM25 keyword search over the corpus. Pass several short sub-queries at once (different phrasings, "
        f"names, facets). For each sub-query the top {k} documents are added to your workspace, a directory you "
        f"then explore with `bash` (rg, grep, ...) and `read`; the workspace only grows, across calls. Returns, "
        f"per sub-query, how many documents matched and how many were new, a top-{preview} preview (rank, score, "
        f"path, title and first table-of-contents lines), and the workspace size.",
        {
            "queries": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "description": 'keyword sub-queries, e.g. ["Lyon silk weavers 1831", "canut revolt"]',
            }
        },
        ["queries"],
    )


def bash_schema(timeout_s: float = 60, max_output_chars: int = 4000, what: str = "your workspace") -> dict:
    return _tool(
        "bash",
        f"Run a bash command with {what} as the current directory (read-only; files are "
        f"<site>/<title>.txt). Available: rg (ripgrep), grep, sed, awk, head, tail, cat, ls, find, wc, sort, "
        f"uniq, cut, tr, xargs. No network. /tmp is writable but private and emptied after every call. Output "
        f"(stdout and stderr) is cut to {max_output_chars} characters and commands are stopped after "
        f"{timeout_s:g} s, so narrow searches down (rg -l, rg -c, head). Structured documents start with a table "
        f"of contents: `## Table of Contents` lines like `- L12–40: Early life — ...`.",
        {"command": {"type": "string", "description": "the bash command, e.g. rg -il 'lyon' | head -20"}},
        ["command"],
    )


def read_schema(max_lines: int = 2000, what: str = "workspace") -> dict:
    return _tool(
        "read",
        f"Read a file of the {what} with 1-indexed line numbers. `path` is relative to the {what} (as rg and "
        f"ls print it). `offset` is the 0-indexed first line, `limit` the number of lines (at most {max_lines}). "
        f"A table-of-contents entry `L12–40` is read with offset=11, limit=29. Long lines are cut.",
        {
            "path": PATH_PROPERTY,
            "offset": {"type": "integer", "minimum": 0, "default": 0, "description": "0-indexed first line"},
            "limit": {"type": "integer", "minimum": 1, "default": max_lines, "description": "number of lines"},
        },
        ["path"],
    )


def read_lines_schema(max_lines: int = 2000) -> dict:
    """`read` where the workspace holds TOC-only files: it opens the structured file the entries point at."""
    schema = read_schema(max_lines)
    schema["function"]["description"] = (
        "Read lines of a document's structured file, with 1-indexed line numbers. The workspace holds each "
        "document's table of contents only; `path` is that file's path in the workspace (as rg and ls print it), "
        "and the lines are those of the whole structured document its entries count. `offset` is the 0-indexed "
        f"first line, `limit` the number of lines (at most {max_lines}). An entry `L12–40` is read with offset=11, "
        "limit=29. Long lines are cut."
    )
    return schema


def retrieval_search_schema(k: int = 5) -> dict:
    return _tool(
        "search",
        f"BM25 search over the corpus. Returns the top {k} documents for the query: docid, score and the first "
        f"~512 tokens of each. Use get_document(docid) to read a whole document.",
        {"query": {"type": "string", "description": "a keyword query"}},
        ["query"],
    )


def get_document_schema() -> dict:
    return _tool(
        "get_document",
        "Return the full text of a document by its docid (as returned by search).",
        {"docid": {"type": "string", "description": "the docid from a search result"}},
        ["docid"],
    )


def snippet_search_schema(top: int = 10, candidates: int = 50, first_lines: int = 3) -> dict:
    return _tool(
        "search",
        f"Search the table-of-contents sections of the corpus. BM25 picks the best {candidates} documents for the "
        f"query, then their sections (as their tables of contents cut them) are ranked against it. Returns the top "
        f"{top} sections (at most a few per document): file path, line range `L<start>–<end>`, section title and "
        f"description, and its first {first_lines} lines with their line numbers. Read a section with "
        f"read(path, start, end).",
        {"query": {"type": "string", "description": "a keyword query, e.g. Lyon silk weavers 1831"}},
        ["query"],
    )


def read_range_schema(max_lines: int = 2000) -> dict:
    return _tool(
        "read",
        f"Read lines `start` to `end` (1-indexed, inclusive) of a document, with their line numbers. `path` is "
        f"the file path search printed. A section `L12–40` is read with start=12, end=40; at most {max_lines} "
        f"lines per call. Long lines are cut.",
        {
            "path": PATH_PROPERTY,
            "start": {"type": "integer", "minimum": 1, "default": 1, "description": "first line (1-indexed)"},
            "end": {"type": "integer", "minimum": 1, "description": "last line, included"},
        },
        ["path", "start", "end"],
    )


def as_responses(tools: list[dict]) -> list[dict]:
    """The Responses API wants the function fields at the top level."""
    return [{"type": "function", **t["function"]} for t in tools]
