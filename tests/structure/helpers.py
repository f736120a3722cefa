"""Checks shared by the structure tests."""

from __future__ import annotations

import re

from rise_batch.structure.anchors import body_start_line
from rise_batch.structure.render import BODY_MARKER, TOC_HEADER, strip_structure
from rise_batch.types import Section

ENTRY = re.compile(r"^- L(\d+)\u2013(\d+): (.*)$")


def check_structure(original: str, rendered: str, sections: list[Section]) -> None:
    """Every property a reader of the structured file relies on."""
    assert strip_structure(rendered) == original
    if not sections:
        assert rendered == original
        return
    lines = rendered.split("\n")
    body = body_start_line(original)
    assert lines[:body] == original.split("\n")[:body]  # frontmatter first, unchanged
    assert lines[body].rstrip("\r") == TOC_HEADER
    entries = [ENTRY.match(ln.rstrip("\r")) for ln in lines[body + 1 : body + 1 + len(sections)]]
    assert all(entries)
    assert lines[body + 1 + len(sections)].rstrip("\r") == BODY_MARKER
    total = len(lines) - (1 if rendered.endswith("\n") else 0)
    starts = [int(m.group(1)) for m in entries]
    for k, m in enumerate(entries):
        start, end = int(m.group(1)), int(m.group(2))
        assert lines[start - 1].rstrip("\r") == "## " + sections[k].title  # range starts on its heading
        assert end == (starts[k + 1] - 1 if k + 1 < len(starts) else total)  # and ends before the next one
        desc = sections[k].description
        if desc:
            assert m.group(3) == f"{sections[k].title} \u2014 {desc}"
        else:  # an empty proposal gets a description from the section's own lines (or its title)
            assert m.group(3).startswith(f"{sections[k].title} \u2014 ") and m.group(3).split(" \u2014 ", 1)[1]
        # the heading sits immediately before the original line the section starts on
        assert lines[start] == original.split("\n")[sections[k].line]
