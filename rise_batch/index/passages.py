"""Passage rules of the dense retriever: how a document is cut into the texts that get one vector each.

One static vector averaged over a 3,700-token article is its topic centroid; a question about one detail of it
matches a passage far better than the whole. So the dense part can embed passages and score a document by its
best passage (max cosine). A rule is a short string the index records (`dense/meta.json` "passages"):

  doc              one vector per document (the whole text, as before passages existed)
  words:N:O        windows of N whitespace-separated words, consecutive windows overlapping by O words
                   (0 <= O < N), the frontmatter left out; each window is prefixed with the document's title
                   (from its frontmatter), so a passage that never names its subject still carries it

Every document gets at least one passage (an empty text gets one empty passage, embedded as a zero vector), so
the passage -> document map is a plain offsets array: the passages of document i are rows offsets[i]:offsets[i+1].
Pure: no I/O, no model.
"""

from __future__ import annotations

from dataclasses import dataclass

from rise_batch.corpus.docmap import frontmatter_title
from rise_batch.errors import ConfigError

DEFAULT_PASSAGES = "words:200:50"


@dataclass(frozen=True)
class PassageRule:
    """`kind` "doc" (whole document) or "words" (windows of `size` words overlapping by `overlap`)."""

    kind: str = "doc"
    size: int = 0
    overlap: int = 0

    def __str__(self) -> str:
        return "doc" if self.kind == "doc" else f"words:{self.size}:{self.overlap}"


def parse_passages(text: str | PassageRule | None) -> PassageRule:
    """`doc` or `words:N[:O]` -> a rule (None -> the default); a one-line ConfigError otherwise."""
    if isinstance(text, PassageRule):
        return text
    raw = (text or DEFAULT_PASSAGES).strip()
    if raw == "doc":
        return PassageRule()
    kind, *nums = raw.split(":")
    bad = ConfigError(f"passages {raw!r}: expected doc or words:N[:O] with N >= 1 words and 0 <= O < N overlapping")
    if kind != "words" or not 1 <= len(nums) <= 2:
        raise bad
    try:
        size, overlap = int(nums[0]), int(nums[1]) if len(nums) == 2 else 0
    except ValueError:
        raise bad from None
    if size < 1 or not 0 <= overlap < size:
        raise bad
    return PassageRule("words", size, overlap)


def body_of(text: str) -> str:
    """The text after a leading YAML frontmatter block (the whole text when there is none)."""
    if text.startswith("---"):
        end = text.find("\n---", 3)
        if end >= 0:
            nl = text.find("\n", end + 4)
            return text[nl + 1 :] if nl >= 0 else ""
    return text


def split_passages(text: str, rule: PassageRule) -> list[str]:
    """The passages of one document under `rule`, in document order; never empty (see the module docstring)."""
    if rule.kind == "doc":
        return [text]
    words = body_of(text).split()
    if len(words) <= rule.size:
        return [text]  # a short document is its own passage, frontmatter and all
    title = frontmatter_title(text)
    prefix = f"{title}\n" if title else ""
    out = []
    for start in range(0, len(words), rule.size - rule.overlap):
        out.append(prefix + " ".join(words[start : start + rule.size]))
        if start + rule.size >= len(words):
            break
    return out
