"""File names made from ids: query ids -> trajectory/judgment file stems, sweep labels -> cell directory names.

Both use the same portable alphabet, `[A-Za-z0-9._-]`, with every run of anything else replaced by one `_`, and
stay within a file name's length (`bounded`).

The corpus's relpaths are NOT made here: `corpus.docmap.sanitize` keeps Unicode word characters and a little more
punctuation (an agent reads titles in `rg` output and `ls`, so `Zürich` stays `Zürich`), NFKC-normalizes and bounds
names in bytes. Its output is the docmap.parquet file format, fixed for existing corpora, so it stays distinct; the
names here only ever key files the project itself writes and reads back.
"""

from __future__ import annotations

import hashlib
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def portable(text: str) -> str:
    """`text` with every run of characters outside `[A-Za-z0-9._-]` replaced by one `_` (nothing else changed)."""
    return _UNSAFE.sub("_", text)


def bounded(name: str, max_bytes: int) -> str:
    """`name` when it fits in `max_bytes` (UTF-8), else its beginning plus a digest of the whole: a file name never
    over the file system's limit (255 bytes a component), and two long names that share a beginning still differ."""
    data = name.encode()
    if len(data) <= max_bytes:
        return name
    digest = hashlib.sha256(data).hexdigest()[:16]
    return f"{data[: max_bytes - len(digest) - 1].decode(errors='ignore')}-{digest}"


def safe_stem(text: str, max_chars: int = 100) -> str:
    """A file stem for an id: the id itself when it is already a clean stem, otherwise its portable form (no leading
    or trailing `.`/`_`, at most `max_chars`) plus a hash of the id, so two ids never share a file."""
    s = portable(text).strip("._")[:max_chars]
    if s == text and s:
        return s
    return f"{s or 'q'}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
