"""What the agent sees of a file: `read`'s numbered line ranges, and the short snippets of search previews.

`read` is the one tool that touches files outside the sandbox, so it resolves every path itself and refuses
anything that is not a regular file under the root: absolute paths, `..`, and symlinks that lead out. Lines are
split on "\n" only, as rg and the TOC's line numbers count them, so `read(offset=N-1)` lands on the TOC's `LN`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from rise_batch.corpus.docmap import frontmatter_title
from rise_batch.structure.anchors import body_start
from rise_batch.structure.render import TOC_HEADER, one_line

MAX_LINE_CHARS = 2000
MAX_READ_LINES = 2000
SNIPPET_HEAD_BYTES = 8192


class PathRefused(ValueError):
    """A `read` path that is not a file inside the root; the message is meant for the agent."""


def resolve_inside(root: Path, path: str) -> tuple[Path, str]:
    """(host path, normalized relative path) of a regular file under `root`, or PathRefused saying why."""
    if not isinstance(path, str) or not path.strip():
        raise PathRefused("read needs a file path relative to the workspace, e.g. 'en.wikipedia.org/Lyon.txt'")
    if "\x00" in path:
        raise PathRefused("the path contains a NUL character")
    p = path.strip()
    if p.startswith(("/", "~")):
        hint = ""
        if p.startswith("/workspace/"):
            hint = f" Use '{p[len('/workspace/') :]}' instead."
        raise PathRefused(f"absolute paths are not allowed: {path!r}. Give a path relative to the workspace.{hint}")
    parts = [x for x in p.split("/") if x not in ("", ".")]
    if ".." in parts:
        raise PathRefused(f"'..' is not allowed in paths: {path!r}. Paths stay inside the workspace.")
    if not parts:
        raise PathRefused(f"{path!r} is the workspace directory itself; use bash (ls, find, rg -l) to list files")
    rel = "/".join(parts)
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(real_root, rel))
    if os.path.commonpath([real_root, real]) != real_root:
        raise PathRefused(f"{path!r} leads outside the workspace (symlink); refused")
    if not os.path.exists(real):
        raise PathRefused(f"no such file in the workspace: {rel!r} (list files with bash: ls, find, rg -l)")
    if os.path.isdir(real):
        raise PathRefused(f"{rel!r} is a directory; list it with bash (ls {rel})")
    if not os.path.isfile(real):
        raise PathRefused(f"{rel!r} is not a regular file")
    return Path(real), rel


def read_numbered(
    file: Path,
    offset: int = 0,
    limit: int = MAX_READ_LINES,
    max_line_chars: int = MAX_LINE_CHARS,
    *,
    by_line: bool = False,
) -> str:
    """`cat -n`-style lines [offset, offset+limit) of `file`, long lines cut, and a trailer saying what remains.

    The trailer speaks the caller's tool's language: 0-indexed `offset=` (read), or with `by_line` 1-indexed
    `start=` (the snippet system's read by range), so the model's next call is the one the trailer names."""
    text = file.read_bytes().decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # a trailing newline ends the last line; it does not start another
    total = len(lines)
    if total == 0:
        return "[empty file: 0 lines]"
    if offset >= total:
        if by_line:
            return f"[start {offset + 1} is past the end: the file has {total} lines (valid start 1-{total})]"
        return f"[offset {offset} is past the end: the file has {total} lines (valid offsets 0-{total - 1})]"
    end = min(total, offset + limit)
    out = []
    for i in range(offset, end):
        line = lines[i].rstrip("\r")
        if len(line) > max_line_chars:
            line = f"{line[:max_line_chars]} [... line cut: {len(line) - max_line_chars:,} more characters]"
        out.append(f"{i + 1:>6}\t{line}")
    left = total - end
    if left:
        again = f"start={end + 1}" if by_line else f"offset={end}"
        out.append(f"[lines {offset + 1}-{end} of {total}; {left:,} more lines: continue with {again}]")
    else:
        out.append(f"[lines {offset + 1}-{end} of {total}; end of file]")
    return "\n".join(out)


class Preview(NamedTuple):
    title: str | None
    toc: list[str]  # first TOC entries ("L12–40: Early life — ...") for structured files
    lead: str  # first body words otherwise


def preview_of(head: str, toc_lines: int = 2, lead_chars: int = 200) -> Preview:
    """Title plus the first TOC entries of a structured file, or its first body words: what tells docs apart."""
    title = frontmatter_title(head)
    body = head[body_start(head)[1] :]
    toc: list[str] = []
    stripped = body.lstrip("\r\n")
    if stripped.startswith(TOC_HEADER):
        for line in stripped.split("\n", toc_lines + 1)[1 : toc_lines + 1]:
            if not line.startswith("- L") or len(toc) >= toc_lines:
                break
            toc.append(one_line(line[2:], 160))
        if toc:
            return Preview(title, toc, "")
    return Preview(title, [], one_line(body[: 4 * lead_chars], lead_chars))


def read_head(path: Path, n_bytes: int = SNIPPET_HEAD_BYTES) -> str:
    with open(path, "rb") as f:
        return f.read(n_bytes).decode("utf-8", errors="ignore")


def prefetch_heads(paths: list[str], n_bytes: int = SNIPPET_HEAD_BYTES) -> None:
    """Ask the kernel to start reading these files' heads now (POSIX_FADV_WILLNEED), all at once, so that the
    previews read them from the page cache. At 1M documents most files are not cached: read one by one, a
    search's 30 previews waited for 30 disk reads in a row (py-spy: a fifth of a search call's wall time under the
    trajectory load). Best effort: a file that cannot be opened is left to the preview to report."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            advise(fd, 0, n_bytes, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


def snippet_line(path: Path) -> str:
    """One line for a search preview."""
    try:
        p = preview_of(read_head(path))
    except OSError as e:
        return f"(unreadable: {e.strerror})"
    parts = [p.title] if p.title else []
    parts += p.toc or ([p.lead] if p.lead else [])
    return " | ".join(parts) or "(empty)"


def leading_text(text: str, max_chars: int) -> str:
    """The document body (after frontmatter) cut near `max_chars` at a word boundary: a retrieval snippet."""
    body = text[body_start(text)[1] :].strip()
    if len(body) <= max_chars:
        return body
    cut = body[:max_chars].rsplit(None, 1)[0]
    return (cut or body[:max_chars]) + " ..."
