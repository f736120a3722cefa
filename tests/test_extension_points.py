"""A contributor's extension, in process: a corpus format, an agent system and a tool kind registered the way
ARCHITECTURE.md says reach the CLI's help, its errors and the guides' generated lists with no other file touched."""

from __future__ import annotations

import pytest

from rise_batch.agent.systems import STRUCTURED, SYSTEMS, TOOL_KINDS, System, ToolKind, get_system
from rise_batch.cli import build_parser
from rise_batch.commands.doc_options import fill
from rise_batch.config import ConfigError
from rise_batch.corpus.readers import FORMATS, CorpusError, CorpusFormat, RawRow, iter_docs, list_sources
from rise_batch.registry import Lazy


def _csv_rows(src, start=0, stop=None, byte_offset=0, columns=None):
    with open(src, encoding="utf-8") as fh:
        for row, line in enumerate(fh):
            if row >= start and (stop is None or row < stop):
                docid, text = line.rstrip("\n").split(",", 1)
                yield RawRow(row, {"docid": docid, "text": text})


def _help(*argv: str) -> str:
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args([*argv, "--help"])
    return ""


def test_a_registered_format_reaches_help_errors_docs_and_reading(tmp_path, monkeypatch, capsys) -> None:
    csv = CorpusFormat(name="csv", label="CSV", suffixes=(".csv",), read_rows=_csv_rows)
    monkeypatch.setitem(FORMATS, "csv", csv)
    (tmp_path / "c.csv").write_text("d1,first text\nd2,second text\n")
    assert [d.docid for d in iter_docs(tmp_path / "c.csv")] == ["d1", "d2"]
    for command in (["structure"], ["index"], ["plan"]):
        _help(*command)
        assert "CSV (.csv)" in " ".join(capsys.readouterr().out.split()), command
    (tmp_path / "x.tsv").write_text("")
    with pytest.raises(CorpusError, match=r"CSV \(\.csv\)"):
        list_sources(tmp_path / "x.tsv")
    with pytest.raises(ConfigError, match=r"CSV \(\.csv\)"):
        from rise_batch.config import StructureConfig

        StructureConfig(out=str(tmp_path / "o")).validate()
    assert "- CSV: `.csv`" in fill("<!-- list: formats -->\n<!-- /list -->")


def test_a_registered_system_and_tool_kind_reach_help_and_docs(monkeypatch, capsys) -> None:
    kind = ToolKind(
        name="grep-only", open=Lazy("rise_batch.agent.tool_sets:open_dci"), uses_index=False, uses_sandbox=True,
        help="grep over the corpus",
    )  # fmt: skip
    monkeypatch.setitem(TOOL_KINDS, "grep-only", kind)
    lite = System(name="rise-lite", label="RISE lite", prompt="agent_dci", docs=STRUCTURED, tools="grep-only", help="h")
    monkeypatch.setitem(SYSTEMS, "rise-lite", lite)
    assert get_system("rise-lite").uses_sandbox and not get_system("rise-lite").uses_index
    _help("run")
    assert "rise-lite" in capsys.readouterr().out
    docs = fill("<!-- list: systems -->\n<!-- /list -->\n<!-- list: tool-kinds -->\n<!-- /list -->")
    assert "`rise-lite` (RISE lite): h; tools: grep-only" in docs and "`grep-only`: grep over the corpus" in docs


def test_an_unknown_tool_kind_or_system_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown tool kind 'shell'; choose 'rise', 'retrieval'"):
        System(name="x", label="X", prompt="agent_rise", docs=STRUCTURED, tools="shell", help="")
    with pytest.raises(ConfigError, match="unknown system 'nope'; choose 'rise'"):
        get_system("nope")
