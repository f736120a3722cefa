"""Mistakes a newcomer makes, through the real `rise-batch` command in a subprocess: one line naming what is wrong and
what to do, exit 2, no traceback, and no empty output directory left behind that looks like a run to resume."""

from __future__ import annotations

import re
import subprocess
from functools import partial
from pathlib import Path

import pytest

from tests.cli import cli as shared_cli
from tests.conftest import SAMPLE, sample_rows, write_jsonl
from tests.docs import doc_files

ROOT = Path(__file__).resolve().parents[2]


cli = partial(shared_cli, drop_env=("OPENAI_API_KEY",))


def one_line_error(done: subprocess.CompletedProcess, command: str) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rise-batch {command}: error: "), done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def struct(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """README's structuring example, heuristic, on the sample (`runs/struct`, no --index)."""
    cwd = tmp_path_factory.mktemp("readme")
    done = cli("structure", "--corpus", str(SAMPLE), "--out", "runs/struct", "--backend", "heuristic", cwd=cwd)
    assert done.returncode == 0, done.stderr
    return cwd


def test_workspace_search_on_a_run_without_index_is_one_line_and_makes_no_workspace(struct: Path) -> None:
    ws = struct / "ws"
    done = cli(
        "workspace",
        "search",
        "--index",
        "runs/struct/index",
        "--docs",
        "runs/struct",
        "--workspace",
        str(ws),
        "q1",
        cwd=struct,
    )
    line = one_line_error(done, "workspace")
    assert "runs/struct/index" in line
    assert not ws.exists()


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_page_builds_the_index_its_workspace_example_searches(doc: Path) -> None:
    """Every `workspace search --index I --docs D` of a page (the README, a guide) reads an index the same page
    builds: `structure --out D ... --index` (which writes D/index) or `index ... --out I`, and docs a `structure
    --out D` of the page writes, so a reader who follows one page from the top gets a working command."""
    text = doc.read_text()
    searches = re.findall(r"rise-batch workspace search --index (\S+) --docs (\S+)", text)
    structures = re.findall(r"rise-batch structure --corpus \S+ --out (\S+)([^\n]*)", text)
    built = {f"{out}/index" for out, rest in structures if "--index" in rest}
    built |= set(re.findall(r"rise-batch index --corpus \S+ --out (\S+)", text))
    structured = {out for out, _ in structures}
    for index, docs in searches:
        assert index in built and docs in structured, (index, docs, sorted(built), sorted(structured))


def test_the_readme_has_a_workspace_example() -> None:
    assert "rise-batch workspace search --index" in (ROOT / "README.md").read_text(), "README has no workspace example"


def test_a_mistyped_query_file_is_named(struct: Path, tmp_path: Path) -> None:
    index = tmp_path / "idx"
    assert cli("index", "--corpus", str(SAMPLE), "--out", str(index), "--workers", "1", cwd=tmp_path).returncode == 0
    line = one_line_error(
        cli("eval-retrieval", "--index", str(index), "--queries", "qeries.jsonl", cwd=tmp_path), "eval-retrieval"
    )
    assert "qeries.jsonl" in line and "does not exist" in line


def test_the_missing_key_error_names_the_flags(tmp_path: Path) -> None:
    out = tmp_path / "out"
    line = one_line_error(
        cli("structure", "--corpus", str(SAMPLE), "--out", str(out), "--backend", "llm", cwd=tmp_path), "structure"
    )
    assert "$OPENAI_API_KEY" in line and "--api-key-env" in line and "--base-url" in line
    assert not out.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["structure", "--corpus", "nope.jsonl"],  # a mistyped corpus
        ["structure", "--corpus", "queries.jsonl"],  # rows without a docid column: refused at the scan
    ],
)
def test_structure_failing_before_work_leaves_no_output_dir(tmp_path: Path, args: list[str]) -> None:
    write_jsonl(tmp_path / "queries.jsonl", [{"query_id": "1", "query": "x"}])
    one_line_error(cli(*args, "--out", "runs/a/b", cwd=tmp_path), "structure")
    assert not (tmp_path / "runs").exists()


def test_run_failing_before_work_leaves_no_output_dir(struct: Path) -> None:
    done = cli(
        "run",
        "--queries",
        "nope.jsonl",
        "--docs",
        "runs/struct",
        "--system",
        "retrieval-agent",
        "--index",
        "runs/struct",
        "--out",
        "runs/rise_x",
        "--base-url",
        "http://127.0.0.1:9/v1",
        cwd=struct,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert not (struct / "runs" / "rise_x").exists()


def test_a_failure_keeps_an_existing_output_dir_and_anything_written(tmp_path: Path) -> None:
    (tmp_path / "runs" / "a").mkdir(parents=True)
    one_line_error(cli("structure", "--corpus", "nope.jsonl", "--out", "runs/a", cwd=tmp_path), "structure")
    assert (tmp_path / "runs" / "a").is_dir()


def test_index_query_prints_titles(tmp_path: Path) -> None:
    rows = sample_rows(30)
    corpus = write_jsonl(tmp_path / "c.jsonl", rows)
    done = cli(
        "index",
        "--corpus",
        str(corpus),
        "--out",
        str(tmp_path / "idx"),
        "--workers",
        "1",
        "--query",
        "Anarchism political philosophy",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    hits = [line for line in done.stdout.splitlines() if line.startswith("  ")]
    assert hits and "enwiki-12" in hits[0] and "Anarchism" in hits[0], done.stdout
