"""Long work shows progress everywhere (issue 13 section 4), checked as a `ray job submit` log sees it: real
`rise-batch` subprocesses whose stdout and stderr go to files (not a terminal), the fake server over HTTP, real Ray.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rise_batch.fake_llm import FakeLLMServer
from tests.conftest import SAMPLE

LINE = re.compile(
    r"^rise-batch (?P<what>[\w\[\]-]+): (?P<done>[\d,]+)/(?P<total>[\d,]+) (?P<unit>\w+) \(\d+%[^)]*\) (?P<rest>.*)$"
)


RAY_OWN_FORMAT = re.compile(r"\t[A-Z]+ \S+\.py:\d+ -- ")  # "<time>\tWARNING file.py:85 -- ...": Ray's handler


def cli(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`python -m rise_batch.cli ARGS` with stdout and stderr redirected to files, as under `ray job submit`."""
    out, err = cwd / "stdout.txt", cwd / "stderr.txt"
    with out.open("w") as o, err.open("w") as e:
        code = subprocess.run(
            [sys.executable, "-m", "rise_batch.cli", *map(str, args)], cwd=cwd, stdout=o, stderr=e, env=env, timeout=300
        ).returncode
    return code, out.read_text(), err.read_text()


def progress_lines(stderr: str, what: str) -> list[re.Match[str]]:
    return [m for m in map(LINE.match, stderr.splitlines()) if m and m["what"] == what]


@pytest.fixture
def slow_server():
    """The fake server answering after 40 ms, one request in five a 429: 40 documents take long enough to see
    progress, and the retries and 429s the progress line counts are real ones."""
    with FakeLLMServer(latency_ms=40, p429=0.2, retry_after_ms=10) as server:
        yield server


def test_structure_prints_progress_lines_and_ends_with_a_next_command_that_works(tmp_path, slow_server):
    args = ["structure", "--corpus", SAMPLE, "--out", tmp_path / "s", "--backend", "llm", "--workers", "0"]
    args += ["--base-url", slow_server.base_url, "--tpm", "100000000", "--rpm", "1000000", "--concurrency", "2"]
    args += ["--shard-docs", "10", "--limit", "40", "--index", "--progress-every", "0.2"]
    code, out, err = cli(*args, cwd=tmp_path)
    assert code == 0, err
    lines = progress_lines(err, "structure[llm]")
    assert len(lines) >= 3, err
    assert all(m["total"] == "40" and m["unit"] == "docs" for m in lines), err
    moving = [m for m in lines if int(m["done"]) > 0]
    assert moving, err
    rest = moving[-1]["rest"]
    shown = re.search(r"[\d.]+ docs/s ETA \w+ \$(?P<usd>\d+\.\d{4}) retries=(?P<r>\d+) 429s=(?P<n429>\d+)$", rest)
    assert shown, rest
    assert float(shown["usd"]) > 0  # dollars so far, measured from the replies
    sent = json.loads((tmp_path / "s" / "stats.json").read_text())["transport"]
    assert 0 < int(shown["n429"]) <= sent["rate_limited"] and 0 < int(shown["r"]) <= sent["retries"], (rest, sent)
    assert progress_lines(err, "index"), err  # the index phase is not silent either

    summary, *following = out.strip().splitlines()
    assert summary.startswith("structure docs_total=40 ") and f"index={tmp_path / 's' / 'index'}" in summary
    assert following[0].startswith("next: rise-batch workspace search --index "), out
    command = shlex.split(following[0].removeprefix("next: "))
    assert command[:3] == ["rise-batch", "workspace", "search"]
    ran = subprocess.run(
        [sys.executable, "-m", "rise_batch.cli", *command[1:]], cwd=tmp_path, capture_output=True, text=True
    )
    assert ran.returncode == 0 and "matched" in ran.stdout, ran.stdout + ran.stderr  # the suggested command works


def test_short_runs_stay_quiet_and_without_index_no_next_command(tmp_path):
    """Default interval 30 s: a run that ends sooner prints no progress line at all."""
    code, out, err = cli("structure", "--corpus", SAMPLE, "--out", tmp_path / "s", "--limit", "30", cwd=tmp_path)
    assert code == 0 and err == "", err
    assert out.count("\n") == 1 and out.startswith("structure docs_total=30 ") and "index=" not in out


def test_index_prints_progress_lines(tmp_path):
    """Plain JSONL is cut into shards whose rows are known up front: done/total; a .gz is read to its end."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(gzip.decompress(SAMPLE.read_bytes()))
    code, out, err = cli("index", "--corpus", corpus, "--out", tmp_path / "ix", "--workers", "1",
                         "--shard-docs", "10", "--progress-every", "0.05", cwd=tmp_path)  # fmt: skip
    assert code == 0, err
    lines = progress_lines(err, "index")
    assert lines and all(m["total"] == "100" and m["unit"] == "rows" for m in lines), err
    assert out.startswith("index docs=100 ")
    code, out, err = cli(
        "index", "--corpus", SAMPLE, "--out", tmp_path / "gz", "--progress-every", "0.05", cwd=tmp_path
    )
    assert code == 0 and re.search(r"^rise-batch index: [\d,]+ rows \(elapsed \d+s\)", err, re.M), err


def test_progress_every_must_be_positive(tmp_path):
    code, _, err = cli("index", "--corpus", SAMPLE, "--out", tmp_path / "ix", "--progress-every", "0", cwd=tmp_path)
    assert code == 2 and err.strip() == (
        "rise-batch index: error: --progress-every must be a positive number of seconds, not 0.0"
    )
    assert not (tmp_path / "ix").exists()


def test_local_ray_prints_no_token_warning_and_log_level_works(tmp_path):
    """A local Ray (--workers 1) with RAY_AUTH_MODE unset: Ray logs "Token authentication is enabled" as a WARNING
    on every start. The command's output has none of it; --log-level info shows Ray's INFO records through the one
    handler, --log-level debug the demoted notice."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    base = ["structure", "--corpus", SAMPLE, "--limit", "20", "--workers", "1", "--shard-docs", "10"]
    code, out, err = cli(*base, "--out", tmp_path / "quiet", cwd=tmp_path, env=env)
    assert code == 0, err
    assert "Token authentication" not in out + err, err
    assert not RAY_OWN_FORMAT.search(err), err  # nothing printed through Ray's own handler either
    assert out.startswith("structure docs_total=20 ")

    code, out, err = cli(*base, "--out", tmp_path / "debug", "--log-level", "debug", cwd=tmp_path, env=env)
    assert code == 0, err
    stamp = r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} "
    assert re.search(stamp + r"INFO ray\._private\.worker: Started a local Ray instance", err, re.M), err
    assert re.search(stamp + r"DEBUG ray\._private\.authentication\.\S+: Token authentication is enabled", err, re.M)
    assert not RAY_OWN_FORMAT.search(err), err  # one handler, one format: Ray's own handler is gone


def test_work_of_an_earlier_run_counts_as_done_but_not_towards_the_rate():
    """A resumed 1M job once showed '7,680 docs/s, ETA 1m10s' with ten minutes left: the shards an earlier run
    finished arrived in an instant and were counted as this run's speed."""
    import time

    from rise_batch.progress import Progress

    p = Progress("structure[llm]", 1000, enabled=False, show_cost=True)
    p.earlier(900, cost=1.5)  # resumed shards: done before this run started
    time.sleep(0.2)
    p.update(10, cost=0.01)  # this run's own work: 10 docs in >= 0.2 s
    m = LINE.match(f"rise-batch {p.line()}")
    assert m and m["done"] == "910" and m["total"] == "1,000"
    rate = float(m["rest"].split(" docs/s")[0].replace(",", ""))
    assert 0 < rate <= 10 / 0.2  # only this run's 10 docs, not 910
    assert "$1.5100" in m["rest"]
    eta = re.search(r"ETA (\d+)s", m["rest"])
    assert eta is None or int(eta[1]) >= 90 * 0.2 / 10  # 90 docs left at this run's rate: not seconds


def test_item_counts_never_add_up_twice():
    """A worker's reports say where a shard stands: repeated, late, or climbing from zero again after the shard was
    redone on a new worker, they never count a document or a dollar twice, and the final stats settle the count."""
    from rise_batch.progress import Progress

    p = Progress("structure[llm]", 40, enabled=False, show_cost=True)
    p.item(0, 8, cost=0.08)
    p.item(0, 8, cost=0.08)  # the same report again
    p.item(1, 5, cost=0.05)
    assert (p.done, p.already) == (13, 0)
    p.item(0, 2, earlier=4, cost=0.02)  # shard 0 redone: 4 checkpointed docs skipped, 2 redone so far
    assert (p.done, p.already) == (13, 0) and round(p.cost, 4) == 0.13
    p.item(0, 14, earlier=4, cost=0.14)  # its new worker passes what the dead one had shown
    assert p.done + p.already == 23 and round(p.cost, 4) == 0.19
    p.item(0, 16, earlier=4, cost=0.20)  # the shard's final stats
    p.item(1, 20, cost=0.2)
    p.item(0, 3, cost=0.03)  # a late report of the redone shard's first worker
    m = LINE.match(f"rise-batch {p.line()}")
    assert m and m["done"] == "40" and "$0.4000" in m["rest"]
