"""The sandbox runner: tools available inside, output merged/truncated/annotated, refusal without bubblewrap."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rise_batch.space.sandbox import RunResult, Sandbox, SandboxLimits, SandboxUnavailable
from tests.space.conftest import TEST_LIMITS


@pytest.fixture
def box(ws_root, bwrap_ok) -> Sandbox:
    (ws_root / "en.wikipedia.org").mkdir()
    (ws_root / "en.wikipedia.org" / "Lyon.txt").write_text("Lyon\nsilk weavers of Lyon\nRhône\n")
    (ws_root / "en.wikipedia.org" / "Paris.txt").write_text("Paris\nSeine\n")
    for p in ws_root.rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return Sandbox(ws_root, TEST_LIMITS)


def test_text_tools_work_inside(box):
    res = box.run(
        "rg -l Lyon | sort; grep -c Seine en.wikipedia.org/Paris.txt; sed -n 2p en.wikipedia.org/Lyon.txt; "
        "awk 'END{print NR}' en.wikipedia.org/Lyon.txt; find . -name '*.txt' | sort | head -1; ls en.wikipedia.org | "
        "wc -l; cut -c1-3 en.wikipedia.org/Paris.txt | tr a-z A-Z | uniq | xargs echo; pwd"
    )
    assert res.output.split("\n") == [
        "en.wikipedia.org/Lyon.txt",
        "1",
        "silk weavers of Lyon",
        "3",
        "./en.wikipedia.org/Lyon.txt",
        "2",
        "PAR SEI",
        "/workspace",
        "",
    ]
    assert res.exit_code == 0 and res.sandboxed and not res.timed_out


def test_rg_handles_utf8_and_line_numbers(box):
    assert box.run("rg -n Rhône").output == "en.wikipedia.org/Lyon.txt:3:Rhône\n"


def test_stdout_and_stderr_merged_with_exit_code(box):
    text = box("echo out; echo err >&2; exit 3")
    assert text == "out\nerr\n[exit code: 3]"
    assert box("true") == "(no output)\n[exit code: 0]"


def test_truncation_counts_characters_not_bytes(box):
    res = box.run("python3 -c \"print('é' * 5000, end='')\"")
    assert res.output == "é" * 4000 and res.cut_chars == 1000
    assert res.render().splitlines()[-2] == "[output truncated: 1,000 more characters not shown]"


def test_cap_kills_and_says_so(box):
    res = box.run("echo started; sleep 30")
    assert res.timed_out and res.exit_code is None and res.output == "started\n"
    assert res.render(2.0).endswith(
        "[killed: exceeded the 2 s time limit; the command and all its processes were stopped]"
    )


def test_closing_output_does_not_escape_the_cap(box):
    res = box.run("exec >&- 2>&-; sleep 30")
    assert res.timed_out


def test_background_children_do_not_hold_the_call(box):
    res = box.run("sleep 30 & echo done")
    assert res.output == "done\n" and not res.timed_out


def test_missing_bubblewrap_is_refused_unless_opted_in(ws_root, capsys):
    with pytest.raises(SandboxUnavailable, match="not installed.*Refusing"):
        Sandbox(ws_root, TEST_LIMITS, bwrap="/nonexistent/bwrap")
    box = Sandbox(ws_root, TEST_LIMITS, bwrap="/nonexistent/bwrap", allow_unsandboxed=True)
    assert "UNSANDBOXED" in capsys.readouterr().err
    res = box.run("pwd; echo x | head -c 1")
    assert not res.sandboxed and res.output == f"{ws_root.resolve()}\nx"


def _root_only(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("the uid switch (and so a root-only parent) only matters when running as root")
    private = tmp_path / "private"  # pytest's tmp dirs are 0700: uid 65534 cannot traverse them
    private.mkdir()
    (private / "a.txt").write_text("hello\n")
    return private


@pytest.mark.parametrize("persistent", [True, False])
def test_a_root_only_parent_keeps_every_bound(tmp_path, bwrap_ok, persistent):
    """A workspace under a directory only root can enter (the demo under /root): the commands still run as the
    unprivileged uid, with the process-count limit, or the sandbox refuses saying why; never bwrap as root."""
    private = _root_only(tmp_path)
    try:
        box = Sandbox(private, TEST_LIMITS, persistent=persistent)
    except SandboxUnavailable as e:  # no private mount namespace here to hand the workspace over by descriptor
        assert str(private) in str(e) and "lacks o+x" in str(e) and "world-traversable" in str(e)
        return
    with box:
        assert box.run_as == 65534
        res = box.run("id -u; ulimit -u; cat a.txt; echo x >> a.txt")
    assert res.output.startswith(f"65534\n{TEST_LIMITS.max_procs}\nhello\n"), res.render()
    assert (private / "a.txt").read_text() == "hello\n"
    assert f"at most {TEST_LIMITS.max_procs} processes per call" in box.bounds_line


def test_a_root_the_sandbox_user_cannot_read_is_refused(tmp_path, bwrap_ok):
    private = _root_only(tmp_path)
    os.chmod(private, 0o700)
    with pytest.raises(SandboxUnavailable, match=f"{private} is not readable by uid 65534.*chmod o\\+rx"):
        Sandbox(private, TEST_LIMITS)


def test_render_shapes():
    r = RunResult("a\n", 0, False, 0, 0.1, True)
    assert r.render() == "a\n[exit code: 0]"
    assert "12,345 more characters" in RunResult("a", 1, False, 12345, 0.1, True).render()


def test_limits_are_configurable():
    lim = SandboxLimits(timeout_s=5)
    assert lim.timeout_s == 5 and SandboxLimits().timeout_s == 60 and SandboxLimits().max_output_chars == 4000


def test_sandbox_root_must_exist(tmp_path):
    with pytest.raises(FileNotFoundError):
        Sandbox(Path(tmp_path) / "nope")
