"""Whatever JSON a model sends, every tool of every system answers with text the model can read; none raises.

The tools are the real ones of each system (agent/systems.py open_tools) over a real structured corpus, its BM25
index and the bubblewrap sandbox. An exception here would end a paid trajectory as `api_error`; a reply holding a
lone surrogate would crash the next model call or the trajectory file. The attacks found first are listed, then
hypothesis generates arguments of every JSON shape (surrogates, NaN and 1e400, lists for strings, huge strings,
deep nesting) and raw argument strings.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rise_batch.agent.systems import SYSTEMS, get_system, open_tools
from rise_batch.index import load_index
from rise_batch.space.docstore import DocStore
from rise_batch.space.tools import MAX_ARGUMENT_CHARS, ToolSet
from tests.agent.helpers import run_dir, world
from tests.real_parts import require_bwrap
from tests.space.conftest import TEST_LIMITS


@pytest.fixture(scope="module")
def system_tools():
    require_bwrap()
    w = world()
    store, index = DocStore(w.docs), load_index(w.index, backend="numpy")
    root = run_dir("tool-arguments")
    opened, workspaces = {}, []
    for name in SYSTEMS:
        tools, ws = open_tools(get_system(name), store, lambda: index, root / name, limits=TEST_LIMITS)
        opened[name] = tools
        workspaces.append(ws)
    yield opened
    for ws in workspaces:
        if ws is not None:
            ws.close()


def _answers_as_text(tools: ToolSet, name: str, arguments, caplog) -> str:
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="rise_batch.space.tools"):
        res = tools.call(name, arguments, timeout_s=1.0)
    assert isinstance(res.text, str) and res.text
    res.text.encode("utf-8")  # no lone surrogate reaches the model or the trajectory file
    json.dumps({"output": res.text, "surfaced": res.surfaced, "retrieved": res.retrieved}, ensure_ascii=False)
    assert not caplog.records, f"{name} raised inside (caught by the last resort): {caplog.records[0].message}"
    return res.text


HUGE = "x" * (MAX_ARGUMENT_CHARS + 1)
ATTACKS = [
    ("read", {"path": "\ud800"}),
    ("read", {"path": "x/\udfff.txt"}),
    ("read", {"path": "a", "offset": float("inf")}),  # what JSON's 1e400 parses to
    ("read", '{"path": "a", "offset": 1e400}'),
    ("read", '{"path": "a", "offset": NaN, "limit": -Infinity}'),
    ("read", {"path": ["a.txt"]}),
    ("read", {"path": HUGE}),
    ("read", {"\ud800": 1}),
    ("bash", {"command": "echo \ud800"}),
    ("bash", '{"command": "echo \\ud800"}'),
    ("bash", {"command": ["ls", "-l"]}),
    ("bash", {"command": HUGE}),
    ("search", {"queries": ["anarchism \ud800"]}),
    ("search", {"queries": "\ud800"}),
    ("search", {"query": ["anarchism", "\udfff"]}),
    ("search", {"queries": [HUGE]}),
    ("search", {"queries": [{"q": ["deep"]}, 1e308, None, True]}),
    ("search", "[" * 100_000 + "]" * 100_000),
    ("search", '{"queries": ["a"], "k": ' + "9" * 5000 + "}"),
    ("get_document", {"docid": "\ud800"}),
    ("get_document", {"docid": ["enwiki-12"]}),
    ("get_document", {"docid": HUGE}),
]


@pytest.mark.parametrize("system", list(SYSTEMS))
def test_known_attacks_come_back_as_error_text(system_tools, system, caplog):
    tools = system_tools[system]
    tried = 0
    for name, arguments in ATTACKS:
        if name in tools.tools:
            text = _answers_as_text(tools, name, arguments, caplog)
            tried += 1
            if isinstance(arguments, dict) and "\ud800" in json.dumps(arguments, ensure_ascii=False, default=str):
                assert "surrogate" in text
    assert tried >= 5


_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())  # surrogates included
_STR = st.one_of(
    st.text(_CHAR, max_size=40),
    st.text(st.sampled_from("ab /.\ud800\udfff\x00\x1b"), max_size=12),
    st.sampled_from(["en.wikipedia.org", "../../etc/passwd", "/workspace/x", "rg -l Lyon | head", "enwiki-12", ""]),
    st.builds(lambda c, n: c * n, st.sampled_from(["x", "é", "\ud800", "/"]), st.sampled_from([1_000, 150_000])),
)
_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), _STR)
_JSON = st.one_of(
    _STR,
    st.recursive(
        _SCALAR, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(_STR, kids, max_size=3), max_leaves=12
    ),
)


def _params(tools: ToolSet, name: str) -> list[str]:
    schema = next(t for t in tools.schemas if t["function"]["name"] == name)
    return list(schema["function"]["parameters"]["properties"])


@st.composite
def _call(draw, tools: ToolSet):
    name = draw(st.sampled_from(list(tools.tools)))
    params = _params(tools, name)
    keys = draw(st.lists(st.sampled_from(params), min_size=1, unique=True))  # mostly well-formed calls ...
    keys += draw(st.lists(st.sampled_from(["query", "timeout_s", "k"]) | _STR, max_size=1))  # ... some not
    arguments = {k: draw(_JSON) for k in keys}
    form = draw(st.sampled_from(["dict", "json", "ascii-json", "raw"]))
    if form == "json":
        return name, json.dumps(arguments, ensure_ascii=False, allow_nan=True) if _encodable(arguments) else arguments
    if form == "ascii-json":  # surrogates travel as \ud800 escapes, as they arrive over HTTP
        return name, json.dumps(arguments, allow_nan=True)
    if form == "raw":
        return name, draw(_STR)
    return name, arguments


def _encodable(value) -> bool:
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=True).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@pytest.mark.parametrize("system", list(SYSTEMS))
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_json_arguments_come_back_as_text(system_tools, system, caplog, data):
    tools = system_tools[system]
    name, arguments = data.draw(_call(tools))
    _answers_as_text(tools, name, arguments, caplog)


def test_workspace_is_unchanged_by_bad_arguments(system_tools):
    """The RISE workspace only grows through successful searches: refused arguments add nothing."""
    tools = system_tools["rise"]
    before = len(tools.ws)
    for arguments in ({"queries": ["\ud800"]}, {"queries": [HUGE]}, "[" * 10_000):
        assert tools.call("search", arguments).error
    assert len(tools.ws) == before
    assert Path(tools.ws.files_dir).is_dir()
