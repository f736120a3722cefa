"""The guides' option tables are the ones made from the config fields (rise_batch/commands/doc_options.py): a default,
flag or help changed on its field shows up in the docs, or this fails. Regenerate them with
`python -m rise_batch.commands.doc_options --write docs/*.md`."""

from __future__ import annotations

import subprocess
import sys

from rise_batch.commands.doc_options import LISTS, TABLES, fill, marked, marked_lists, table
from tests.conftest import REPO
from tests.docs import doc_files


def test_every_marked_table_is_the_generated_one() -> None:
    stale = [str(p.relative_to(REPO)) for p in doc_files() if fill(p.read_text()) != p.read_text()]
    assert not stale, f"option tables out of date in {stale}: run python -m rise_batch.commands.doc_options --write"


def test_every_command_with_a_layout_has_its_table_in_a_guide() -> None:
    shown = {c for p in doc_files() for c in marked(p.read_text())}
    assert shown == set(TABLES)


def test_a_changed_table_is_rewritten_by_the_writer(tmp_path) -> None:
    """The writer a maintainer runs puts back the generated table over a stale one, and leaves the prose alone."""
    page = tmp_path / "page.md"
    page.write_text("before\n<!-- options: judge -->\n| stale |\n<!-- /options -->\nafter\n")
    out = subprocess.run(
        [sys.executable, "-m", "rise_batch.commands.doc_options", "--write", str(page)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    assert page.read_text() == f"before\n<!-- options: judge -->\n{table('judge')}<!-- /options -->\nafter\n"


def test_the_tables_list_every_config_key_with_its_default() -> None:
    """Config-file-only keys are listed too, and defaults come from the fields (RunConfig's own llm defaults)."""
    run = table("run")
    assert "| (config file) | `bash_nice` | int | `10` |" in run
    assert "| `--max-output-tokens` | `llm.max_output_tokens` | int | `16,384` |" in run
    assert "| `--timeout` | `llm.timeout_s` | float | `600` |" in run
    structure = table("structure")
    assert "| `--max-output-tokens` | `llm.max_output_tokens` | int | `4,096` |" in structure
    assert "| (config file) | `flush_seconds` | float | `5` |" in structure


def test_the_commands_without_a_config_file_have_tables_of_their_flags() -> None:
    """index, eval-retrieval, workspace, report, plan and the shared output flags: defaults from their fields."""
    assert "| `--shard-docs` | int | `2,000` | documents per shard |" in table("index")
    assert "| `--k` | str | `10,100,1000` |" in table("eval-retrieval")
    assert "| `-k` | int | `1,000` |" in table("workspace-search")
    assert "| `--timeout` | float | `60` |" in table("workspace-bash")
    assert "| `--limit` | int | `2,000` |" in table("workspace-read")
    assert "| `--calibration-bin` | int | `100` |" in table("report")
    assert "| `--tpm` | int | `2,000,000` |" in table("plan")  # LLMConfig's
    assert "| `--tokens-per-section` | float | `57` |" in table("plan")
    assert "| `--log-level` | `debug` \\| `info` \\| `warning` \\| `error` | `warning` |" in table("output")


def test_contributing_regenerates_every_file_with_tables() -> None:
    """The regeneration command CONTRIBUTING.md gives names every file that holds a generated table."""
    import re
    import shlex

    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    found = re.search(r"`python -m rise_batch\.commands\.doc_options --write ([^`]+)`", text)
    assert found, "CONTRIBUTING.md gives no doc_options --write command"
    named = set(shlex.split(found.group(1)))
    texts = {str(p.relative_to(REPO)): p.read_text() for p in doc_files()}
    marked_files = {name for name, text in texts.items() if marked(text) or marked_lists(text)}
    assert marked_files <= named, f"CONTRIBUTING.md's command leaves out {sorted(marked_files - named)}"


def test_every_registry_list_a_guide_marks_is_known_and_users_see_systems_and_formats() -> None:
    lists = {kind for p in doc_files() for kind in marked_lists(p.read_text())}
    assert lists <= set(LISTS) and {"formats", "systems", "retrievers"} <= lists, lists
