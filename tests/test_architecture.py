"""ARCHITECTURE.md stays the map of the house: its Layout names every module of rise_batch/ in the entry of the
folder that holds it (a top-level module as `name.py`, a package's module by its name in that package's entry), and
the repository cites no file it lacks."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "rise_batch"
GUIDE = REPO / "ARCHITECTURE.md"
ENTRY = re.compile(r"^  (?=\S)")  # a line of the tree's rise_batch/ block that starts an entry (two spaces in)


def layout_entries() -> dict[str, str]:
    """The Layout's rise_batch/ block as {head: text}: the head is what an entry names before its description
    (`index/`, `cli.py, commands/`, `strtable.py, strtable_batch.py`), the text the whole entry."""
    text = GUIDE.read_text(encoding="utf-8")
    block = text[text.index("## Layout") : text.index("## The layer rule")]
    lines = block[block.index("\nrise_batch/\n") + 1 :].split("\n```", 1)[0].splitlines()[1:]
    entries: dict[str, str] = {}
    head = ""
    for line in lines:
        if not line.startswith(" "):
            break  # the tree's next top-level folder (prompts/, jobs/, ...)
        if ENTRY.match(line):
            head = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
            entries[head] = ""
        entries[head] += line + "\n"
    return entries


def missing_from_layout() -> list[str]:
    """What to add to the Layout, one line per module it does not name."""
    entries = layout_entries()
    top = " ".join(entries)
    wanted: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.name == "__init__.py" and len(rel.parts) == 1:
            continue
        if len(rel.parts) == 1:
            if not re.search(rf"(?<![\w/]){re.escape(rel.name)}\b", top):
                wanted.append(f"rise_batch/{rel}: add `{rel.name}` (and a few words on what it does) to the tree")
            continue
        folder = "/".join(rel.parts[:-1]) + "/"
        entry = next((t for h, t in entries.items() if folder in re.split(r",\s*", h)), None)
        if entry is None:
            wanted.append(f"rise_batch/{rel}: add an entry `{folder}` (what the package is, then its modules)")
        elif rel.name != "__init__.py" and not re.search(rf"(?<![\w.]){re.escape(rel.stem)}(\.py)?(?!\w)", entry):
            wanted.append(f"rise_batch/{rel}: add `{rel.stem}` (and a few words on what it does) to `{folder}`")
    return wanted


def test_the_layout_names_every_module_where_it_lives() -> None:
    missing = missing_from_layout()
    assert not missing, "ARCHITECTURE.md's Layout does not name every module:\n" + "\n".join(missing)


def test_the_check_sees_a_module_the_layout_does_not_name(tmp_path, monkeypatch) -> None:
    """The walk is real: a module of a package nobody named, and a loose one, are each reported with what to add."""
    package = tmp_path / "rise_batch"
    (package / "index").mkdir(parents=True)
    (package / "index" / "tfidf.py").write_text("")
    (package / "index" / "retriever.py").write_text("")
    (package / "lock.py").write_text("")
    (package / "views").mkdir()
    (package / "views" / "toc_only.py").write_text("")
    monkeypatch.setitem(globals(), "PACKAGE", package)
    assert missing_from_layout() == [
        "rise_batch/index/tfidf.py: add `tfidf` (and a few words on what it does) to `index/`",
        "rise_batch/lock.py: add `lock.py` (and a few words on what it does) to the tree",
        "rise_batch/views/toc_only.py: add an entry `views/` (what the package is, then its modules)",
    ]


def test_no_file_cites_a_design_document_the_repository_lacks() -> None:
    """The rules the code relies on are stated in ARCHITECTURE.md ("The rules the code relies on"), not in a file
    that is not here."""
    citing = [
        str(p.relative_to(REPO))
        for p in sorted(PACKAGE.rglob("*"))
        if p.is_file() and p.suffix in (".py", ".yaml", ".md") and "DESIGN.md" in p.read_text(encoding="utf-8")
    ]
    assert (REPO / "DESIGN.md").exists() or not citing, f"cite ARCHITECTURE.md's rules instead of DESIGN.md: {citing}"
