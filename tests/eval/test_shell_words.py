"""shell_words splits a shell line exactly as shlex (posix, punctuation_chars, whitespace_split) does: shlex is the
oracle, on generated lines made of the characters its rules turn on, and on commands agents write."""

from __future__ import annotations

import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from rise_batch.eval.interaction import _SPLIT, _simple_commands, interaction
from rise_batch.eval.shell_words import shell_words, shlex_words

# every character class shlex treats apart (blanks, quotes, the escape, the comment, punctuation, word characters,
# characters outside its word set), and fragments agents use
PIECES = list(" \t\r\n'\"\\#();<>|&$*=-./~`{}!?[]aZ09_é€\x00") + ["rg -n ", "cat ", " | ", "2>/dev/null", "&&", "\\\n"]
LINES = st.lists(st.sampled_from(PIECES), max_size=40).map("".join)


@settings(max_examples=3000, deadline=None)
@given(LINES)
@example("rg -n 'a b' docs/ | head -n 20 && cat \"x y/1.txt\" 2>/dev/null")
@example("echo \"a\\$b\\\\c\\\"d\" 'it''s' \\x")
@example("a#b c\n# whole line\nd")
@example("''|\"\"&&x")
@example("echo 'open")
@example('echo "open\\')
@example("trailing\\")
def test_shell_words_agrees_with_shlex(line: str) -> None:
    assert shell_words(line) == shlex_words(line)


@given(st.text(max_size=30))
def test_shell_words_agrees_with_shlex_on_any_text(line: str) -> None:
    assert shell_words(line) == shlex_words(line)


def test_a_bash_read_is_counted_as_before() -> None:
    """The interaction metrics read commands through shell_words: a quoted path read with cat is the gold's."""
    step = {"tool": "bash", "arguments": {"command": "cat 'en.wiki/A b.txt' | head -n 3"}, "output": "1\n2\n3",
            "surfaced": [], "added": 0, "output_lines": 3}  # fmt: skip
    row = interaction({"steps": [step], "gold_paths": {"d": "en.wiki/A b.txt"}}, {"d"})
    assert row["gold_read"] and row["gold_lines_read"] == 3 and row["gold_read_steps"] == [0]


def simple_commands_as_before(command: str) -> tuple[tuple[str, ...], ...]:
    """interaction._simple_commands as it was before it was cached and took its tokens apart by first character
    (each token's characters put in sets): the oracle of the faster one."""
    tokens = shell_words(command)
    if tokens is None:
        return ()
    out, cur, skip = [], [], False
    for tok in [*tokens, ";"]:
        if skip:
            skip = False
        elif set(tok) <= set("<>&") and set(tok) & set("<>"):
            skip = True
            if cur and cur[-1].isdigit():
                cur.pop()
        elif tok in _SPLIT or set(tok) <= set("|&;()"):
            if cur:
                out.append(tuple(cur))
            cur = []
        elif not cur and re.match(r"^[A-Za-z_]\w*=", tok):
            continue
        else:
            cur.append(tok)
    if any(w[0] == "cd" for w in out):
        out = out[: next(i for i, w in enumerate(out) if w[0] == "cd")]
    return tuple(out)


COMMAND_PIECES = PIECES + ["X=1 ", "cd d; ", "2>&1", " >> f", "<in ", "'' ", "'<' ", "'\n;' ", "sed -n '1,40p' "]


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.sampled_from(COMMAND_PIECES), max_size=30).map("".join))
@example("X=1 Y=2 cat a.txt 2>/dev/null | head -n 5 && cd x; cat b")
@example("cat '' gold.txt")  # a quoted empty word separates commands, as it did
@example("echo '<' '>>' '&' x")
def test_simple_commands_split_as_before(line: str) -> None:
    assert _simple_commands(line) == simple_commands_as_before(line)
