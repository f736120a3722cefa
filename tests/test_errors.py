"""One error -> exit code map for the CLI and jobs/: every code and message format the entry points had before."""

from __future__ import annotations

import pytest

from rise_batch.cli import main
from rise_batch.corpus.readers import CorpusError
from rise_batch.errors import EXIT_BUDGET, ConfigError, exit_code_for, run_main
from rise_batch.queries import QueryFileError
from rise_batch.space.sandbox import SandboxUnavailable
from rise_batch.structuring.budget import BudgetExceeded


def _raise(exc: BaseException):
    def fn() -> int:
        raise exc

    return fn


@pytest.mark.parametrize(
    ("exc", "code", "line"),
    [
        (ConfigError("bad key"), 2, "job: error: bad key"),
        (CorpusError("c.jsonl: row 3: empty text"), 2, "job: error: c.jsonl: row 3: empty text"),
        (QueryFileError("q.jsonl: line 1: invalid JSON"), 2, "job: error: q.jsonl: line 1: invalid JSON"),
        (FileExistsError("out exists; pass --overwrite"), 2, "job: error: out exists; pass --overwrite"),
        (FileNotFoundError("no docs"), 2, "job: error: no docs"),
        (ValueError("probabilities must be in [0, 1]"), 2, "job: error: probabilities must be in [0, 1]"),
        (SandboxUnavailable("bwrap is not installed"), 2, "job: bwrap is not installed"),
        (BudgetExceeded(1.0, 0.9, 0.2), EXIT_BUDGET, "job: stopped before the cost limit"),
        (KeyboardInterrupt(), 130, "prog: interrupted; re-run the same command to resume"),
    ],
)
def test_codes_and_messages(exc: BaseException, code: int, line: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code_for(exc) == code
    assert run_main(_raise(exc), "job", program="prog") == code
    assert capsys.readouterr().err.startswith(line)


def test_return_values_and_bugs() -> None:
    assert run_main(lambda: None, "job") == 0 and run_main(lambda: 1, "job") == 1
    assert exit_code_for(RuntimeError("a bug")) is None and exit_code_for(SystemExit(2)) is None
    with pytest.raises(RuntimeError):
        run_main(_raise(RuntimeError("a bug")), "job")  # propagates with its traceback


def test_cli_names_the_command(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["structure", "--corpus", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith("rise-batch structure: error: ")
    (tmp_path / "ws" / "files").mkdir(parents=True)
    (tmp_path / "ws" / "manifest.jsonl").write_text("")
    # workspace bash's positional is named `command` too: the message still names the subcommand
    code = main(["workspace", "bash", str(tmp_path / "ws"), "true"])
    err = capsys.readouterr().err
    assert code in (0, 2) and (code == 0 or err.startswith("rise-batch workspace bash: "))
