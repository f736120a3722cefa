"""docid -> relpath: the file name an agent sees for a document in rg output and `ls`.

RISE used `<url host>/<sanitized title>.txt`, which is readable but not unique. We keep that form, make it safe
(no `..`, no absolute paths, no control characters, bounded length) and unique (case-insensitively, so a corpus
copied to macOS does not collide) by suffixing the docid when a name is already taken. Assignment happens in one
ordered pass, so the same corpus always gets the same map.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from urllib.parse import urlsplit

MAX_NAME_BYTES = 150
_UNSAFE = re.compile(r"[^\w.\-()+,'&]+", re.UNICODE)


def frontmatter_title(text: str) -> str | None:
    """The `title:` of a leading YAML frontmatter block, as BrowseComp-Plus documents carry."""
    if not text.startswith("---"):
        return None
    for i, line in enumerate(text.split("\n", 40)[1:40]):
        if line.strip() == "---":
            return None
        if line.startswith("title:"):
            value = line[6:].strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            return value or None
        if i > 38:
            break
    return None


def sanitize(part: str, max_bytes: int = MAX_NAME_BYTES) -> str:
    """One safe path component: word characters and a little punctuation, never `.`/`..`, bounded in bytes.

    Not `rise_batch.names`: relpaths keep Unicode titles readable and are the docmap's file format, so this
    alphabet and its byte bound stay exactly as they are (see that module's docstring).
    """
    s = unicodedata.normalize("NFKC", part).strip()
    s = _UNSAFE.sub("_", s).strip("._")
    while len(s.encode("utf-8")) > max_bytes:
        s = s[:-1]
    return s or "_"


def host_of(url: str | None) -> str:
    if not url:
        return "docs"
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        host = ""
    return sanitize(host, 80) if host else "docs"


class RelpathAssigner:
    """Hands out unique relpaths in call order; the only state is the set of names taken."""

    def __init__(self) -> None:
        self._taken: set[str] = set()

    def assign(self, docid: str, url: str | None, title: str | None) -> str:
        host = host_of(url)
        base = sanitize(title) if title else sanitize(docid)
        candidates = (
            f"{host}/{base}.txt",
            f"{host}/{sanitize(base, 100)}~{sanitize(docid, 40)}.txt",
            f"{host}/{sanitize(base, 100)}~{hashlib.sha1(docid.encode()).hexdigest()[:16]}.txt",
        )
        for rel in candidates:
            if rel.casefold() not in self._taken:
                self._taken.add(rel.casefold())
                return rel
        n = 2
        while True:  # only reachable with adversarial docids; still deterministic
            rel = f"{host}/{sanitize(base, 100)}~{hashlib.sha1(docid.encode()).hexdigest()[:16]}-{n}.txt"
            if rel.casefold() not in self._taken:
                self._taken.add(rel.casefold())
                return rel
            n += 1


MAX_RELPATH_BYTES = 1024  # what the assigner makes stays far below (host 80 + name 150+57 bytes)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\\]")  # C0, DEL, C1; and backslash, which sanitize never emits
# The common case in one match: printable ASCII components of 1-255 bytes, none of them `.` or `..`.
_SAFE_ASCII = re.compile(
    r"(?:(?!\.\.?(?:/|$))[\x20-\x2e\x30-\x5b\x5d-\x7e]{1,255}/)*(?!\.\.?$)[\x20-\x2e\x30-\x5b\x5d-\x7e]{1,255}"
)


REMEDY_DOCMAP = (
    "the docmap was altered or not written by rise-batch; to re-create it, move DIR/manifest.json aside and re-run "
    "the same `rise-batch structure` command (it re-scans the corpus and keeps the checkpoint)"
)


class UnsafePathError(ValueError):
    """A relative path read from a file (docmap, workspace or batch manifest) that could leave its directory."""


def relpath_problem(rel: object) -> str | None:
    """Why `rel` is not a safe relative path, or None when it is: the docmap's rules, for any path read from a file.

    Safe means what `RelpathAssigner` makes: a string, relative, no empty/`.`/`..` component, no control character
    or backslash, at most 255 bytes per component and MAX_RELPATH_BYTES in all, NFKC-normalised (so two spellings
    of one name cannot both exist). A path failing any of these did not come from this project.
    """
    if isinstance(rel, str) and rel.isascii() and len(rel) <= MAX_RELPATH_BYTES and _SAFE_ASCII.fullmatch(rel):
        return None  # fast path: 1M docmap rows are checked on every load
    if not isinstance(rel, str):
        return f"not a string ({type(rel).__name__})"
    if not rel:
        return "empty"
    if rel.startswith("/"):
        return "absolute"
    if _CONTROL.search(rel):
        return "control character or backslash"
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "empty, '.' or '..' component"
    try:
        size = len(rel.encode("utf-8"))
    except UnicodeEncodeError:
        return "not encodable as UTF-8 (lone surrogate)"
    if size > MAX_RELPATH_BYTES or any(len(p.encode("utf-8")) > 255 for p in parts):
        return "too long"
    if not unicodedata.is_normalized("NFKC", rel):
        return "not NFKC-normalised"
    return None


def is_safe_relpath(rel: object) -> bool:
    return relpath_problem(rel) is None


def check_relpath(rel: object, where: str, remedy: str = "") -> str:
    """`rel` if it is safe to join to a directory, else UnsafePathError naming `where` (file, row) and `remedy`.

    The one check for every relative path read back from a file, applied where it is read, before any join.
    """
    problem = relpath_problem(rel)
    if problem is None:
        return rel  # type: ignore[return-value]
    shown = repr(rel) if len(repr(rel)) <= 200 else repr(rel)[:200] + "..."
    raise UnsafePathError(f"{where}: unsafe path {shown} ({problem}){'; ' + remedy if remedy else ''}")


def check_relpaths(rels, where: str, remedy: str = "", names=None) -> None:
    """Check a whole column at once; the first unsafe row is named (with its docid when `names` are given)."""
    for i, rel in enumerate(rels):
        if relpath_problem(rel) is not None:
            label = f"row {i}" + (f" (docid {names[i]!r})" if names is not None else "")
            check_relpath(rel, f"{where}: {label}", remedy)


def checked_columns(table, where: str) -> tuple[list, list[str]]:
    """(docids, relpaths) of a docmap table (all of it or a slice), every relpath checked: the one way to read it.

    Invalid UTF-8 in the file is refused the same way as an unsafe path, with the file named, not a traceback.
    """
    try:
        docids, rels = table.column("docid").to_pylist(), table.column("relpath").to_pylist()
    except UnicodeDecodeError:
        import pyarrow as pa

        for name in ("docid", "relpath"):
            for i, raw in enumerate(table.column(name).cast(pa.binary()).to_pylist()):
                try:
                    raw is None or raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise UnsafePathError(
                        f"{where}: row {i}: unsafe path, {name} {raw[:200]!r} is not valid UTF-8 ({e.reason}); "
                        + REMEDY_DOCMAP
                    ) from None
        raise
    check_relpaths(rels, where, REMEDY_DOCMAP, names=docids)
    return docids, rels
