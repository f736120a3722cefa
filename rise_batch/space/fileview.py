"""What the agent sees of a file: `read`'s numbered line ranges, and the short snippets of search previews.

`read` is the one tool that touches files outside the sandbox, so it checks every path itself and opens it below
the root without following links (space/safe_open.py): absolute paths, `..`, symlinks and anything but a regular
file are refused. Lines are split on "\n" only, as rg and the TOC's line numbers count them, so `read(offset=N-1)`
lands on the TOC's `LN`. The file is streamed: only the lines asked for are kept (each cut to its first
MAX_LINE_CHARS characters), newlines are counted a bounded distance past them, so a 1 GiB document costs a few MB
of memory; NUL bytes are shown as U+2400 (␀), never passed on raw.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import NamedTuple

from rise_batch.corpus.docmap import frontmatter_title
from rise_batch.space.safe_open import Below, NotADocument, reopen
from rise_batch.structure.anchors import body_start
from rise_batch.structure.render import TOC_HEADER, one_line

MAX_LINE_CHARS = 2000
MAX_READ_LINES = 2000
SNIPPET_HEAD_BYTES = 8192
READ_CHUNK = 1 << 20
SCAN_AHEAD_BYTES = 64 << 20  # read past the start of the lines asked for: counts "N more lines", bounds a long line
NUL_SHOWN = "\u2400"
_CONTINUATION = bytes(range(0x80, 0xC0))  # UTF-8 bytes that do not start a character


class PathRefused(ValueError):
    """A `read` path that is not a file inside the root; the message is meant for the agent."""


def agent_relpath(path: object) -> str:
    """The normalized relative path of a model's `read` argument, or PathRefused saying why (nothing opened)."""
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
    return "/".join(parts)


def open_inside(root: Below, path: object) -> tuple[int, str]:
    """(readable descriptor, normalized relative path) of the regular file `path` below `root`, reached without
    following a link, or PathRefused saying why. The caller closes the descriptor."""
    rel = agent_relpath(path)
    try:
        fd, _ = root.open(rel)
    except NotADocument as e:
        if e.what == "is a directory":
            raise PathRefused(f"{rel!r} is a directory; list it with bash (ls {rel})") from None
        raise PathRefused(f"{rel!r} {e.what}; only regular files can be read") from None
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG):
            hint = "(list files with bash: ls, find, rg -l)"
            raise PathRefused(f"no such file in the workspace: {rel!r} {hint}") from None
        raise
    try:
        return reopen(fd), rel
    finally:
        os.close(fd)


class _Window(NamedTuple):
    lines: list[tuple[bytes, int]]  # (the line's first bytes, characters beyond them) for each line shown
    total: int | None  # lines in the file, None when not counted to its end
    cut_short: bool  # the last line shown was still going when the scan stopped


def scan_lines(fd: int, offset: int, limit: int, keep: int, ahead: int = SCAN_AHEAD_BYTES) -> _Window:
    """Lines [offset, offset+limit) of the file open at `fd`, streamed in READ_CHUNK reads: memory is the lines
    kept (`keep` bytes each at most) plus one chunk. Lines before `offset` are only counted; past the offset at most
    `ahead` bytes are read, so neither a long tail nor a one-line gigabyte costs more than that."""
    lines: list[tuple[bytes, int]] = []
    idx, end = 0, offset + limit  # idx: the line the next byte belongs to
    cur, extra, crs = bytearray(), 0, 0  # the line being kept: its first bytes, characters beyond, trailing \r's
    open_line, scanned, started = False, 0, False
    while True:
        chunk = os.read(fd, READ_CHUNK)
        if not chunk:
            break
        open_line = chunk[-1] != 10
        n, pos = len(chunk), 0
        while pos < n:
            if idx < offset:
                c = chunk.count(b"\n", pos)
                if idx + c < offset:
                    idx, pos = idx + c, n
                    break
                while idx < offset:
                    pos, idx = chunk.index(b"\n", pos) + 1, idx + 1
                continue
            if not started:
                started, scanned = True, -pos  # count from where the lines asked for begin
            if idx < end:
                nl = chunk.find(b"\n", pos)
                stop = n if nl < 0 else nl
                room = keep - len(cur)
                if room > 0:
                    cur += chunk[pos : min(stop, pos + room)]
                if stop - pos > max(room, 0):
                    extra += len(chunk[pos + max(room, 0) : stop].translate(None, _CONTINUATION))
                if stop > pos:
                    tail = len(chunk[pos:stop]) - len(chunk[pos:stop].rstrip(b"\r"))
                    crs = crs + tail if tail == stop - pos else tail
                if nl < 0:
                    break
                lines.append(_kept(cur, extra, crs))
                cur, extra, crs, idx, pos = bytearray(), 0, 0, idx + 1, nl + 1
            else:
                idx, pos = idx + chunk.count(b"\n", pos), n
        if started:
            scanned += n
            if scanned >= ahead:
                if idx < end and open_line:  # stopped inside a line being shown
                    lines.append(_kept(cur, extra, 0))
                    return _Window(lines, None, True)
                return _Window(lines, None, False)
    if open_line:  # the last line has no newline
        if offset <= idx < end:
            lines.append(_kept(cur, extra, crs))
        idx += 1
    return _Window(lines, idx, False)


def _kept(cur: bytearray, extra: int, crs: int) -> tuple[bytes, int]:
    """A line's kept bytes and the characters beyond them, not counting the trailing \r's a shown line drops
    (when every byte beyond is one of them, the kept bytes are the whole line)."""
    return bytes(cur), (0 if crs >= extra else extra - crs)


def read_numbered(
    file: Path | int,
    offset: int = 0,
    limit: int = MAX_READ_LINES,
    max_line_chars: int = MAX_LINE_CHARS,
    *,
    by_line: bool = False,
    ahead: int = SCAN_AHEAD_BYTES,
) -> str:
    """`cat -n`-style lines [offset, offset+limit) of `file` (a path, or a readable descriptor the caller
    closes), long lines cut, NULs shown as ␀, and a trailer saying what remains.

    The trailer speaks the caller's tool's language: 0-indexed `offset=` (read), or with `by_line` 1-indexed
    `start=` (the snippet system's read by range), so the model's next call is the one the trailer names."""
    if not isinstance(file, int):
        with open(file, "rb") as f:
            return read_numbered(f.fileno(), offset, limit, max_line_chars, by_line=by_line, ahead=ahead)
    w = scan_lines(file, offset, limit, 4 * max_line_chars + 4, ahead)
    total = w.total
    if total == 0:
        return "[empty file: 0 lines]"
    if total is not None and offset >= total:
        if by_line:
            return f"[start {offset + 1} is past the end: the file has {total} lines (valid start 1-{total})]"
        return f"[offset {offset} is past the end: the file has {total} lines (valid offsets 0-{total - 1})]"
    out = []
    for i, (raw, extra) in enumerate(w.lines, offset):
        line = raw.decode("utf-8", errors="replace")
        if not extra:
            line = line.rstrip("\r")
        if len(line) > max_line_chars or extra:
            at_least = "at least " if w.cut_short and i == offset + len(w.lines) - 1 else ""
            more = len(line) - max_line_chars + extra
            line = f"{line[:max_line_chars]} [... line cut: {at_least}{more:,} more characters]"
        out.append(f"{i + 1:>6}\t{line.replace(chr(0), NUL_SHOWN)}")
    end = offset + len(w.lines)
    again = f"start={end + 1}" if by_line else f"offset={end}"
    if total is None:
        size = os.fstat(file).st_size
        if not w.lines:  # cannot happen with limit >= 1; said plainly rather than an empty reply
            return f"[no line found within {ahead >> 20} MB after line {offset} (the file is {size:,} bytes)]"
        what = f"line {end} goes on" if w.cut_short else "more lines follow"
        out.append(
            f"[lines {offset + 1}-{end}; {what} (the file is {size:,} bytes, counted {ahead >> 20} MB past line "
            f"{offset + 1}): continue with {again}]"
        )
    elif total - end:
        out.append(f"[lines {offset + 1}-{end} of {total}; {total - end:,} more lines: continue with {again}]")
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


def read_head(root: Below, rel: str, n_bytes: int = SNIPPET_HEAD_BYTES) -> str:
    """The first bytes of the regular file `rel` below `root` (no link followed), as text."""
    return root.read(rel, n_bytes).decode("utf-8", errors="ignore")


def prefetch_heads(root: Below, rels: list[str], n_bytes: int = SNIPPET_HEAD_BYTES) -> None:
    """Ask the kernel to start reading these files' heads now (POSIX_FADV_WILLNEED), all at once, so that the
    previews read them from the page cache. At 1M documents most files are not cached: read one by one, a
    search's 30 previews waited for 30 disk reads in a row (py-spy: a fifth of a search call's wall time under the
    trajectory load). Best effort: a file that cannot be opened, or is no document, is left to the preview."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    for rel in rels:
        try:
            fd, _ = root.open(rel)
        except (OSError, NotADocument):
            continue
        try:
            rfd = reopen(fd)
        except OSError:
            continue
        finally:
            os.close(fd)
        try:
            advise(rfd, 0, n_bytes, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(rfd)


def snippet_line(root: Below, rel: str) -> str:
    """One line for a search preview of the file `rel` below `root`."""
    try:
        p = preview_of(read_head(root, rel))
    except NotADocument as e:
        return f"(refused: the file {e.what})"
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
