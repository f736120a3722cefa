"""The words of a shell line, as `shlex.shlex(line, posix=True, punctuation_chars=True)` with `whitespace_split`
splits them, at a fraction of the cost (pure: no I/O).

The interaction metrics split every bash command of every trajectory, and shlex reads its input one character at
a time through a state machine in Python: 0.9 ms a command, half of a report over 2,000 trajectories of 100 steps.
Here one regular expression finds the tokens (runs of blanks, a `#` comment, a run of the punctuation `();<>|&`, a
word made of plain text, quoted strings and backslash escapes) and only a word holding quotes or backslashes is
unquoted piece by piece. The rules are shlex's, even where a shell differs (a `#` inside an unquoted word starts a
comment; a newline is a blank), because shlex is the oracle the tests compare this with.
"""

from __future__ import annotations

import functools
import re
import shlex

_BLANK = " \t\r\n"
_PUNCT = "();<>|&"
# Every character starts one of these, so the matches tile the line: blanks and comments (skipped), a punctuation
# run, a word, or a quote or backslash no word could take (a quote left open, a backslash at the end: an error).
_TOKEN = re.compile(
    rf"""[{_BLANK}]+|\#[^\n]*\n?
    |([{re.escape(_PUNCT)}]+)
    |((?:[^{_BLANK}\#{re.escape(_PUNCT)}'"\\]+|'[^']*'|"(?:[^"\\]|\\[\s\S])*"|\\[\s\S])+)
    |(['"\\])""",
    re.VERBOSE,
)
_PIECE = re.compile(r"""[^'"\\]+|'([^']*)'|"((?:[^"\\]|\\[\s\S])*)"|\\([\s\S])""")
_QUOTED_ESCAPE = re.compile(r"\\([\\\"])")  # inside "...", only \\ and \" lose their backslash


def _unquote(word: str) -> str:
    out = []
    for m in _PIECE.finditer(word):
        single, double, escaped = m.groups()
        if single is not None:
            out.append(single)
        elif double is not None:
            out.append(_QUOTED_ESCAPE.sub(r"\1", double))
        elif escaped is not None:
            out.append(escaped)
        else:
            out.append(m.group())
    return "".join(out)


@functools.lru_cache(maxsize=65536)
def shell_words(line: str) -> tuple[str, ...] | None:
    """The tokens shlex gives for `line` (words unquoted, punctuation runs as tokens); None where shlex raises
    ValueError (a quote left open, a backslash at the end). Cached: agents run the same command again and again."""
    out: list[str] = []
    for punct, word, bad in _TOKEN.findall(line):
        if bad:
            return None
        if punct:
            out.append(punct)
        elif word:
            out.append(_unquote(word) if "'" in word or '"' in word or "\\" in word else word)
    return tuple(out)


def shlex_words(line: str) -> tuple[str, ...] | None:
    """The same split by shlex itself: the oracle `shell_words` is tested against (and timed against in
    bench/report_html.py)."""
    try:
        lex = shlex.shlex(line, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        return tuple(lex)
    except ValueError:  # a quote left open, a backslash at the end
        return None
