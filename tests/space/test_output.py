"""A command's output is cleaned of control sequences the same way whatever it holds, in time linear in its size.

The reference is the single pattern the cleaner used before, which gave the right answers but rescanned the rest of
the text after every C1 string opener without a terminator: a flood of U+0090 (bytes C2 90) held a 1 s call for
half a minute. The flood tests run through the real sandbox; their limits only catch that kind of stall.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rise_batch.space.output import Cleaner, strip_controls
from rise_batch.space.sandbox import Sandbox
from tests.space.conftest import TEST_LIMITS

REFERENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d-\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"
    r"|\x1b[ -/]*[0-OQ-WYZ\\`-~]"
    r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
)
# every character the patterns treat apart (openers, terminators, parameter/intermediate/final bytes, edges of the
# control ranges), plain text and a non-ASCII letter
ALPHABET = "\x00\x01\x07\x1a\x1b\x1c\x7f\x90\x98\x9b\x9c\x9d\x9e\x9f\x8f\x9a[]PX^_\\/ 09;?@m~é\n\t\r"
texts = st.text(alphabet=ALPHABET, max_size=40)


@settings(max_examples=3000, deadline=None)
@given(texts)
def test_cleaning_matches_the_single_pattern(text):
    assert strip_controls(text) == REFERENCE.sub("", text)


@settings(max_examples=500, deadline=None)
@given(texts, st.lists(st.integers(min_value=0, max_value=200), max_size=6))
def test_cleaning_does_not_depend_on_where_reads_split(text, cuts):
    """A sequence split across reads is held back until it is complete (these are shorter than the hold)."""
    data = text.encode()
    points = sorted({min(c, len(data)) for c in cuts})
    clean = Cleaner()
    pieces = [clean.feed(data[a:b]) for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert "".join(pieces) + clean.feed(b"", final=True) == REFERENCE.sub("", text)


@pytest.fixture
def box(ws_root, bwrap_ok):
    with Sandbox(ws_root, TEST_LIMITS) as sandbox:
        yield sandbox


FLOOD = "python3 -c \"import sys\nwhile True: sys.stdout.buffer.write(b'\\xc2\\x90' * 65536)\""


@pytest.mark.parametrize("persistent", [True, False])
def test_a_c1_flood_is_stopped_at_the_cap(ws_root, bwrap_ok, persistent):
    """An endless flood of U+0090 ends at the time cap like any other command, with nothing to show."""
    with Sandbox(ws_root, TEST_LIMITS, persistent=persistent) as box:
        start = time.monotonic()
        res = box.run(FLOOD)
        took = time.monotonic() - start
    assert res.timed_out and res.output == "" and res.cut_chars == 0, res.render()
    assert took < TEST_LIMITS.timeout_s + 10, f"{took:.1f} s for a {TEST_LIMITS.timeout_s} s cap"


def test_a_document_of_c1_characters_is_read_through(box, ws_root):
    """`cat` of 8 MB of U+0090 around a line of text shows the line (the old cleaner needed minutes)."""
    doc = ws_root / "c1.txt"
    doc.write_bytes(b"\xc2\x90" * (2 << 20) + b"visible\n" + b"\xc2\x90" * (2 << 20))
    os.chmod(doc, 0o644)
    res = box.run("cat c1.txt; echo done", dataclasses.replace(TEST_LIMITS, timeout_s=60))
    assert not res.timed_out and res.exit_code == 0, res.render()[-300:]
    assert res.output == "visible\ndone\n" and res.cut_chars == 0
