from __future__ import annotations

import random
import string

from rise_batch.corpus.docmap import RelpathAssigner, frontmatter_title, is_safe_relpath


def test_readable_host_and_title():
    a = RelpathAssigner()
    assert a.assign("12", "https://en.wikipedia.org/wiki?curid=12", "Anarchism") == "en.wikipedia.org/Anarchism.txt"
    assert a.assign("13", None, "Jean-Paul Sartre (philosopher)") == "docs/Jean-Paul_Sartre_(philosopher).txt"


def test_collisions_are_resolved_case_insensitively_and_deterministically():
    def run() -> list[str]:
        a = RelpathAssigner()
        return [a.assign(d, "http://h.org/x", t) for d, t in [("1", "Paris"), ("2", "paris"), ("3", "Paris")]]

    first = run()
    assert first == run()
    assert len({p.casefold() for p in first}) == 3
    assert first[0] == "h.org/Paris.txt"


def test_hostile_titles_and_docids_stay_safe():
    rng = random.Random(7)
    alphabet = string.printable + "/\\..\x00\x1f\u202e\u00e9\u4e2d"
    a = RelpathAssigner()
    seen = set()
    for i in range(3000):
        title = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 400)))
        docid = rng.choice(["../../etc/passwd", "/abs", "..", "x" * 500, str(i)]) + str(i)
        url = rng.choice([None, "not a url", "http://[bad", "https://ok.example.com/p", "file:///etc/passwd"])
        rel = a.assign(docid, url, title or None)
        assert is_safe_relpath(rel), rel
        assert all(len(part.encode()) <= 255 for part in rel.split("/"))
        assert rel.casefold() not in seen
        seen.add(rel.casefold())


def test_frontmatter_title():
    assert frontmatter_title('---\ntitle: "Albedo"\nurl: x\n---\nbody') == "Albedo"
    assert frontmatter_title("no frontmatter\ntitle: x") is None
    assert frontmatter_title("---\nurl: x\n---\ntitle: late") is None
