"""Anchor validation: the fast implementation against a brute-force reference, plus the rules one by one."""

from __future__ import annotations

import random
import re

import pytest

from rise_batch.structure.anchors import body_start_line, normalize_ws, validate_anchors
from rise_batch.types import AnchorOutcome

FM = "---\ntitle: Test doc\nurl: http://x\n---\n"


# ---- brute-force reference: per character, per line, no clever indexing -------------------------------------


def ref_body_line(text: str) -> int:
    lines = text.split("\n")
    if lines and lines[0].rstrip("\r") == "---":
        for j in range(1, min(len(lines), 200)):
            if lines[j].rstrip("\r") == "---":
                return j + 1
    return 0


def ref_validate(text: str, anchors: list[str]) -> list[AnchorOutcome]:
    lines = text.split("\n")
    body = ref_body_line(text)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln) + 1)
    body_char = min(starts[body], len(text))

    def line_of(p: int) -> int:
        return max(i for i in range(len(lines)) if starts[i] <= p)

    def rank(p: int) -> int:
        ln = line_of(p)
        if text[starts[ln] : p].strip():
            return 0
        return 2 if ln == body or not lines[ln - 1].strip() else 1

    # Normalised body built char by char, with the original offset of every normalised char.
    norm_chars: list[str] = []
    orig: list[int] = []
    for p in range(body_char, len(text)):
        if text[p].isspace():
            if p == body_char or not text[p - 1].isspace():  # first char of a whitespace run
                norm_chars.append(" ")
                orig.append(p)
        else:
            norm_chars.append(text[p])
            orig.append(p)
    norm = "".join(norm_chars)

    def norm_hits(needle: str) -> list[int]:
        return [orig[q] for q in range(len(norm)) if norm.startswith(needle, q)]

    out, prev, taken = [], body - 1, set()
    for i, a in enumerate(anchors):
        a = a.strip()
        tiers = []
        if a:
            tiers.append(("exact", 0, [p for p in range(body_char, len(text)) if text.startswith(a, p)]))
            na = re.sub(r"\s+", " ", a)
            tiers.append(("normalized", 0, norm_hits(na)))
            words = na.split(" ")
            tiers += [("prefix", n, norm_hits(" ".join(words[:n]))) for n in (12, 10, 8, 6) if len(words) > n]
        res = AnchorOutcome(i, "not-found")
        for status, n, hits in tiers:
            if not hits:
                continue
            ok = [p for p in hits if line_of(p) > prev]
            if not ok:
                res = AnchorOutcome(i, "duplicate" if any(line_of(p) in taken for p in hits) else "out-of-order")
                break
            best = sorted(ok, key=lambda p: (-rank(p), p))[0]
            res = AnchorOutcome(i, status, line_of(best), best, n)
            prev = line_of(best)
            taken.add(prev)
            break
        out.append(res)
    return out


# ---- generated cases ----------------------------------------------------------------------------------------

VOCAB = "alpha beta gamma delta river stone Lyon 1901 paris born career the of and war peace".split()
SEPARATORS = [" ", " ", " ", "  ", "\t", "\n", "\n\n", " \n", "\u00a0", "\n\n\n  "]


def random_doc(rng: random.Random) -> tuple[str, list[str]]:
    """A small document from a tiny vocabulary (so phrases repeat), with varied whitespace and blank lines."""
    words = [rng.choice(VOCAB) for _ in range(rng.randint(5, 90))]
    parts = []
    for w in words:
        parts.append(w)
        parts.append(rng.choice(SEPARATORS) if rng.random() < 0.3 else " ")
    text = "".join(parts)
    if rng.random() < 0.5:
        text = FM + text
    if rng.random() < 0.2:
        text = text.replace("\n", "\r\n")
    return text, words


def random_anchor(rng: random.Random, text: str, words: list[str]) -> str:
    kind = rng.random()
    if kind < 0.35:  # a verbatim span of the text
        body = text[len(FM) :] if text.startswith(FM) else text
        a = rng.randrange(len(body))
        return body[a : a + rng.randint(1, 80)]
    start = rng.randrange(len(words))
    span = words[start : start + rng.randint(1, 15)]
    if kind < 0.7:  # re-spaced
        return rng.choice(["", " ", "\n"]) + " ".join(span) + rng.choice(["", " "])
    if kind < 0.9:  # real prefix then words that are not there (prefix tiers)
        return " ".join(words[start : start + rng.randint(6, 14)] + ["zzz", "qqq"])
    return rng.choice(["", "   ", "title: Test doc", "nothing like this", "alpha beta"])


@pytest.mark.parametrize("seed", range(6))
def test_matches_brute_force_reference(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(250):
        text, words = random_doc(rng)
        anchors = [random_anchor(rng, text, words) for _ in range(rng.randint(0, 8))]
        if rng.random() < 0.3:
            rng.shuffle(anchors)  # out-of-order proposals
        if anchors and rng.random() < 0.3:
            anchors.append(rng.choice(anchors))  # duplicated proposals
        assert validate_anchors(text, anchors) == ref_validate(text, anchors), (text, anchors)


def test_reference_check_exercises_every_outcome() -> None:
    rng = random.Random(99)
    seen: set[str] = set()
    for _ in range(400):
        text, words = random_doc(rng)
        anchors = [random_anchor(rng, text, words) for _ in range(6)]
        rng.shuffle(anchors)
        seen |= {o.status for o in validate_anchors(text, anchors + anchors[:2])}
    assert seen == {"exact", "normalized", "prefix", "not-found", "out-of-order", "duplicate"}


# ---- rules one by one ---------------------------------------------------------------------------------------


def test_body_start_line() -> None:
    assert body_start_line(FM + "x") == 4
    assert body_start_line("no frontmatter\n---\n") == 0
    assert body_start_line("---\nnever closed\nstill open") == 0
    assert body_start_line("---\r\na: 1\r\n---\r\nbody") == 3
    assert body_start_line("---\na: 1\n---") == 3
    assert body_start_line("") == 0


def test_frontmatter_is_not_searched() -> None:
    text = FM + "Body text mentions Test doc here.\n"
    [o] = validate_anchors(text, ["title: Test doc"])
    assert o.status == "not-found"
    [o] = validate_anchors(text, ["Test doc"])
    assert (o.status, o.line) == ("exact", 4)


def test_anchor_mid_line_maps_to_its_line() -> None:
    text = "first line\nsome words before the anchor phrase is here\nlast"
    [o] = validate_anchors(text, ["the anchor phrase"])
    assert (o.status, o.line, o.char) == ("exact", 1, text.index("the anchor"))


def test_anchor_with_leading_newline_lands_on_the_text_line() -> None:
    text = "intro\nSecond line starts here\n"
    [o] = validate_anchors(text, ["\nSecond line"])
    assert (o.status, o.line) == ("exact", 1)


def test_whitespace_normalised_and_prefix_tiers() -> None:
    text = "Intro.\nThe quick  brown\tfox jumps over\nthe lazy dog near the river bank today.\n"
    [o] = validate_anchors(text, ["The quick brown fox jumps over the lazy dog"])
    assert (o.status, o.line) == ("normalized", 1)
    words = "The quick brown fox jumps over the lazy dog near the river bank".split()
    [o] = validate_anchors(text, [" ".join(words[:11] + ["CHANGED", "words"])])
    assert (o.status, o.prefix_words, o.line) == ("prefix", 10, 1)
    [o] = validate_anchors(text, [" ".join(words[:7] + ["paraphrased"])])
    assert (o.status, o.prefix_words) == ("prefix", 6)
    [o] = validate_anchors(text, ["The quick brown paraphrased"])  # under 6 words: nothing to cut back to
    assert o.status == "not-found"


def test_tie_break_prefers_paragraph_start_then_earliest() -> None:
    text = "Words then Early life appears mid-line.\nEarly life at a line start.\n\nEarly life after a blank line.\n"
    [o] = validate_anchors(text, ["Early life"])
    assert o.line == 3
    text2 = "Intro.\nRepeated item here.\nRepeated item here.\nRepeated item here.\n"
    outs = validate_anchors(text2, ["Repeated item here."] * 3)
    assert [o.line for o in outs] == [1, 2, 3]  # a catalogue of repeated phrases maps item by item


def test_order_and_uniqueness() -> None:
    text = "Alpha section starts.\nBeta section starts.\nGamma section starts.\n"
    outs = validate_anchors(text, ["Beta section", "Alpha section", "Gamma section", "Gamma section starts"])
    assert [o.status for o in outs] == ["exact", "out-of-order", "exact", "duplicate"]
    assert [o.line for o in outs] == [1, -1, 2, -1]
    same_line = validate_anchors("one two three four five six\n", ["one two", "four five"])
    assert [o.status for o in same_line] == ["exact", "duplicate"]


def test_empty_inputs() -> None:
    assert validate_anchors("", ["x"]) == [AnchorOutcome(0, "not-found")]
    assert validate_anchors("text", []) == []
    assert [o.status for o in validate_anchors("text", ["", "  \n"])] == ["not-found", "not-found"]


def test_normalize_ws() -> None:
    assert normalize_ws("  a \n\t b\u00a0c ") == "a b c"


def test_search_after_a_line_that_follows_many_blank_lines() -> None:
    # The previous anchor's line starts deep inside a collapsed whitespace run; the normalised search that
    # resumes there must not jump past the next line.
    text = "Intro\n" + "\n" * 8 + "   Ab\nAb  cd\n"
    outs = validate_anchors(text, ["Ab", "Ab cd"])
    assert [(o.status, o.line) for o in outs] == [("exact", 9), ("normalized", 10)]
    assert outs == ref_validate(text, ["Ab", "Ab cd"])


@pytest.mark.parametrize("run", [2, 63, 64, 65, 130, 200])
def test_long_whitespace_runs_on_both_sides_of_the_key_word(run: int) -> None:
    # The normalised matcher finds the longest word and checks the others around it, skipping whitespace in
    # 64-char slices: runs shorter than, equal to and longer than a slice, before and after that word.
    gap = " " * (run - 1) + "\n"
    text = f"Intro line.\nalpha{gap}beta keywordlongest gamma{gap}delta end\n"
    anchor = "alpha beta keywordlongest gamma delta"
    [o] = validate_anchors(text, [anchor])
    assert (o.status, o.line, o.char) == ("normalized", 1, 12)
    assert [o] == ref_validate(text, [anchor])
