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


def is_safe_relpath(rel: str) -> bool:
    parts = rel.split("/")
    return (
        not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts) and not any(ord(c) < 32 for c in rel)
    )
