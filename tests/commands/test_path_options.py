"""Every path option of every command and job script takes a storage URI or refuses it in one line naming the
option; none turns `s3://b/x` into a local directory `s3:/b/x`.

The walk is driven by the parsers themselves (tests/commands/test_help.py `parsers`): every option that takes a
string is either a path that says what it takes (`options.URI` or `options.local(...)`) or is listed here as not a
path, and every command with path options has a scenario below naming each of them, so a new path option fails
here until it is walked. Each option is then given an `s3://` value on the real S3 server (tests/s3.py), the inputs
being copies of a real local world in the bucket, and the command must either work, writing into the bucket, or
exit 2 with one line naming the option, and no `s3:` may appear in the working directory or the world.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from rise_batch.cli import main
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.option_paths import URI, checked_path, shown_name
from rise_batch.storage import location
from tests.commands.test_help import ROOT, parsers
from tests.conftest import SAMPLE

# string options that are not paths (models, URLs, names, rules, query text)
NOT_PATHS = {
    *("--model", "--base-url", "--api-key-env", "--reasoning-effort", "--columns", "--retriever", "--embedder"),
    *("--system", "--ray-address", "--query", "--tag", "--k", "--host", "--judge-reply", "--passages", "--only"),
    "queries",  # workspace search's keyword queries
    "shell_command",  # workspace bash's shell command
    "path",  # workspace read's path inside the workspace
}
NEW = "<new>"  # a fresh output location
MODEL = ("--model", "gpt-5.4-mini")
FAST = ("--rpm", "100000", "--tpm", "1000000000")


def name_of(action: argparse.Action) -> str:
    return action.option_strings[0] if action.option_strings else action.dest


def takes_text(action: argparse.Action) -> bool:
    return (
        isinstance(action, (argparse._StoreAction, argparse._AppendAction))
        and action.type is None
        and action.choices is None
    )


def path_options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {name_of(a): a for a in parser._actions if getattr(a, "path_kind", None) is not None}


def test_every_text_option_is_a_path_that_says_what_it_takes_or_not_a_path() -> None:
    unmarked = [
        f"{command} {name_of(a)}"
        for command, parser in parsers()
        for a in parser._actions
        if takes_text(a) and getattr(a, "path_kind", None) is None and name_of(a) not in NOT_PATHS
    ]
    assert not unmarked, f"declare these as paths (options.URI or options.local(why)) or list them here: {unmarked}"


class Scenario(NamedTuple):
    """A command line that works with local paths (`{NAME}` marks where a path option's value goes) and, for each
    path option, its local value: a file or directory of the world, or NEW (a fresh output)."""

    argv: list[str]
    paths: dict[str, str]


def scenarios(url: str) -> dict[str, Scenario]:
    run = [
        *("--queries", "{--queries}", "--system", "retrieval-agent", "--docs", "{--docs}", "--index", "{--index}"),
        *("--out", "{--out}", "--limit", "2", "--workers", "0", "--no-progress", "--index-backend", "numpy"),
        *("--base-url", url, *MODEL, *FAST),
    ]
    run_paths = {
        **{"--queries": "q.jsonl", "--docs": "st", "--index": "st/index", "--out": NEW, "--original-docs": "st"},
        **{"--qrels": "qrels.txt", "--config": "run.yaml", "--workspace-root": NEW, "--cache-dir": NEW},
    }
    structure = ["--corpus", "{--corpus}", "--out", "{--out}", "--limit", "5", "--no-progress", "--backend", "llm"]
    structure += ["--base-url", url, *MODEL, *FAST]
    structure_paths = {
        **{"--corpus": "corpus.jsonl.gz", "--out": NEW, "--config": "structure.yaml"},
        **{"--prices-file": "prices.yaml", "--llm-tier": "tier.txt"},
    }
    ws = "{workspace}"
    return {
        "rise-batch structure": Scenario(["structure", *structure], structure_paths),
        "jobs/structure_corpus.py": Scenario([*structure, "--workers", "0"], {**structure_paths, "--base": "."}),
        "rise-batch run": Scenario(["run", *run], run_paths),
        "jobs/run_trajectories.py": Scenario(run, {**run_paths, "--base": "."}),
        "jobs/eval_sweep.py": Scenario(
            ["--config", "{--config}", "--dry-run"], {"--config": "sweep.yaml", "--base": "."}
        ),
        "rise-batch sweep": Scenario(["sweep", "{config}", "--dry-run"], {"config": "sweep.yaml"}),
        "rise-batch materialize": Scenario(
            ["materialize", "{out}", "--dest", "{--dest}"], {"out": "st", "--dest": NEW}
        ),
        "rise-batch index": Scenario(
            ["index", "--corpus", "{--corpus}", "--out", "{--out}", "--no-progress"],
            {"--corpus": "corpus.jsonl.gz", "--out": NEW},
        ),
        "rise-batch plan": Scenario(
            ["plan", "--corpus", "{--corpus}", "--sample", "5", *MODEL],
            {
                "--corpus": "corpus.jsonl.gz",
                "--prompt": "structure_prompt.txt",
                "--llm-tier": "tier.txt",
                "--prices-file": "prices.yaml",
            },
        ),
        "rise-batch eval-retrieval": Scenario(
            ["eval-retrieval", "--index", "{--index}", "--queries", "{--queries}"],
            {"--index": "st/index", "--queries": "q.jsonl", "--qrels": "qrels.txt", "--trec-run": NEW, "--out": NEW},
        ),
        "rise-batch workspace search": Scenario(
            ["workspace", "search", "--index", "{--index}", "--docs", "{--docs}", "--workspace", "{--workspace}"]
            + ["-k", "5", "anarchism"],
            {"--index": "st/index", "--docs": "st", "--workspace": NEW},
        ),
        "rise-batch workspace bash": Scenario(["workspace", "bash", ws, "ls"], {"workspace": "ws"}),
        "rise-batch cache list": Scenario(["cache", "list", "--cache-dir", "{--cache-dir}"], {"--cache-dir": NEW}),
        "rise-batch cache prune": Scenario(
            ["cache", "prune", "--unused", "--cache-dir", "{--cache-dir}"], {"--cache-dir": NEW}
        ),
        "rise-batch workspace read": Scenario(["workspace", "read", ws, "x.txt"], {"workspace": "ws"}),
        "rise-batch workspace info": Scenario(["workspace", "info", ws], {"workspace": "ws"}),
        "rise-batch judge": Scenario(
            ["judge", "{run_dirs}", "--base-url", url, *MODEL],
            {"run_dirs": "run", "--queries": "q.jsonl", "--prompt": "judge_prompt.txt"},
        ),
        "rise-batch report": Scenario(
            ["report", "{run_dirs}", "--out", "{--out}"],
            {"run_dirs": "run", "--out": NEW, "--retrieval": "retrieval.json", "--qrels": "qrels.txt"},
        ),
        "rise-batch export": Scenario(
            ["export", "bcp", "{run_dir}", "--out", "{--out}"], {"run_dir": "run", "--out": NEW, "--docs": "st"}
        ),
        "rise-batch demo": Scenario(["demo", "--out", "{--out}"], {"--out": NEW}),
        "rise-batch status": Scenario(["status", "{dir}"], {"dir": "run"}),
    }


class World(NamedTuple):
    root: Path  # the local world
    remote: str  # its copy in the bucket
    url: str  # the fake LLM server

    def value(self, rel: str, remote: bool, scheme: str = "s3") -> str:
        """`rel` of the world: a local path, or as a URI (its copy in the bucket, or a file:// URI of it)."""
        if rel == NEW:
            rel = f"new/{uuid.uuid4().hex[:8]}"
        if not remote:
            return str(self.root / rel)
        return f"{self.remote}/{rel}" if scheme == "s3" else (self.root / rel).resolve().as_uri()


def write_world(root: Path, url: str) -> None:
    """A structured sample corpus with its index, a query file and qrels, a judged run, a workspace, an
    eval-retrieval result, and the small files options read (configs, prompts, a tier list, a price table)."""
    shutil.copy(SAMPLE, root / "corpus.jsonl.gz")
    shutil.copy(ROOT / "jobs" / "queries_demo.jsonl", root / "q.jsonl")
    (root / "qrels.txt").write_text("demo-01 0 enwiki-12 1\ndemo-02 0 enwiki-324 1\n")
    (root / "tier.txt").write_text("enwiki-12\n")
    (root / "prices.yaml").write_text("models:\n  my-model: {input: 1.0, cached_input: 0.1, output: 2.0}\n")
    (root / "structure.yaml").write_text("shard_docs: 50\n")
    (root / "run.yaml").write_text("k: 50\n")
    shutil.copy(ROOT / "prompts" / "judge_grader.txt", root / "judge_prompt.txt")
    shutil.copy(ROOT / "prompts" / "structure_toc.txt", root / "structure_prompt.txt")
    st = root / "st"
    assert (
        main(["structure", "--corpus", str(root / "corpus.jsonl.gz"), "--out", str(st), "--index", "--no-progress"])
        == 0
    )
    (root / "sweep.yaml").write_text(
        f"sweep:\n  name: walk\n  out: {root / 'sweep'}\n  queries: {root / 'q.jsonl'}\n  limit: 2\n"
        f"  systems: [retrieval-agent]\n  models: [gpt-5.4-mini]\n  k: [20]\n"
        f"  corpora:\n    - name: sample\n      docs: {st}\n      index: {st / 'index'}\n"
        f"  run:\n    workers: 0\n    llm:\n      base_url: {url}\n"
        f"  judge:\n    model: gpt-5.4-mini\n    base_url: {url}\n"
    )
    run = scenarios(url)["rise-batch run"]
    argv = [a.format_map({"--queries": root / "q.jsonl", "--docs": st, "--index": st / "index", "--out": root / "run"})
            for a in run.argv]  # fmt: skip
    assert main(argv) == 0
    assert main(["judge", str(root / "run"), "--base-url", url, *MODEL]) == 0
    ws = ["workspace", "search", "--index", str(st / "index"), "--docs", str(st), "--workspace", str(root / "ws")]
    assert main([*ws, "-k", "5", "anarchism"]) == 0
    er = ["eval-retrieval", "--index", str(st / "index"), "--queries", str(root / "q.jsonl")]
    assert main([*er, "--out", str(root / "retrieval.json")]) == 0


def upload(root: Path, remote: str) -> None:
    """Every file of the local world as an object under `remote`, at the same relative path."""
    dest = location(remote)
    for f in sorted(root.rglob("*")):
        if f.is_file() and not f.is_symlink():
            (dest / f.relative_to(root).as_posix()).upload(f)


@pytest.fixture(scope="module")
def world(s3, tmp_path_factory):
    root = tmp_path_factory.mktemp("walk")
    root.chmod(0o755)
    cache = tmp_path_factory.mktemp("walk-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("RISE_BATCH_CACHE", str(cache))
    mp.chdir(root)
    try:
        with FakeLLMServer() as server:
            write_world(root, server.base_url)
            remote = s3.uri("walk")
            upload(root, remote)
            yield World(root, remote, server.base_url)
    finally:
        mp.undo()


def job_main(script: str) -> Callable[[list[str]], int]:
    spec = importlib.util.spec_from_file_location(f"walk_{Path(script).stem}", ROOT / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def all_parsers() -> dict[str, argparse.ArgumentParser]:
    return dict(parsers())


def test_every_command_with_path_options_has_a_scenario_naming_each() -> None:
    have = {name: sorted(path_options(p)) for name, p in all_parsers().items() if path_options(p)}
    walked = {name: sorted(s.paths) for name, s in scenarios("http://x").items()}
    assert have == walked


def s3_dirs(*roots: Path) -> list[Path]:
    """Directories a URI was taken for: `s3:` (or `file:`) below the working directory or the world."""
    return [p for r in roots for p in r.rglob("*") if p.name.startswith(("s3:", "file:"))]


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["s3", "file"])
@pytest.mark.parametrize("command", sorted(scenarios("http://x")))
def test_each_path_option_takes_a_uri_or_refuses_it_in_one_line(command, scheme, world, tmp_path, monkeypatch, capsys):
    """s3:// (the copy in the bucket) and file:// (the local world itself, as a URI: read as the path it names)."""
    scenario = scenarios(world.url)[command]
    parser = all_parsers()[command]
    run = job_main(command) if command.startswith("jobs/") else main
    monkeypatch.chdir(tmp_path)
    failures = []
    for name, action in path_options(parser).items():
        values = {k: world.value(v, remote=k == name, scheme=scheme) for k, v in scenario.paths.items()}
        argv = [values[a[1:-1]] if a.startswith("{") and a[1:-1] in values else a for a in scenario.argv]
        if "{" + name + "}" not in scenario.argv:
            argv += [name, values[name]] if name.startswith("-") else [values[name]]
        code = run(argv)
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        if action.path_kind.kind == "uri":
            written = (
                scenario.paths[name] != NEW or location(values[name]).exists() or location(values[name]).list(True)
            )
            if code != 0 or not written:
                failures.append(f"{name} {values[name]}: exit {code}, written={bool(written)}: {err[-3:]}")
        elif scheme == "file":  # the path it names, taken as given
            if any("a local path only" in line for line in err):
                failures.append(f"{name} {values[name]}: refused: {err[-3:]}")
        elif not (
            code == 2 and len(err) == 1 and f"{shown_name(action)} s3://" in err[0] and "a local path only" in err[0]
        ):
            failures.append(f"{name} {values[name]}: exit {code}, want 2 and one line naming it: {err[-3:]}")
        assert not s3_dirs(tmp_path, world.root), f"{command} {name}: a directory named {scheme}: appeared"
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    ("argv", "yaml", "key"),
    [
        (["run", "--queries", "q.jsonl", "--out", "o", "--docs", "d"], "workspace_root: s3://b/ws\n", "workspace_root"),
        (["run", "--queries", "q.jsonl", "--out", "o", "--docs", "d"], "run:\n  cache_dir: gs://b/c\n", "cache_dir"),
    ],
)
def test_a_config_file_key_that_takes_a_local_path_refuses_a_uri_in_one_line(argv, yaml, key, tmp_path, monkeypatch):
    """The same check as the flags', on the keys of a config file (config.build_section reads every one)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text(yaml)
    r = subprocess.run(
        [sys.executable, "-m", "rise_batch.cli", *argv, "--config", "c.yaml"], capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and f"{key} " in lines[0] and "a local path only" in lines[0], r.stderr
    assert not s3_dirs(tmp_path)


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--queries", "q.jsonl", "--docs", "d", "--out", "s3:relative"],
        ["structure", "--corpus", str(SAMPLE), "--out", "S3:/b/x"],
        ["index", "--corpus", str(SAMPLE), "--out", "gs:idx"],
        ["run", "--queries", "q.jsonl", "--out", "o", "--config", "c.yaml"],
    ],
    ids=["run", "structure", "index", "config-key"],
)
def test_a_storage_scheme_without_slashes_is_a_malformed_uri_never_a_local_directory(argv, tmp_path, monkeypatch):
    """`s3:relative` (or `S3:/b/x`, `gs:x`, a config key `docs: s3:d`) is refused in one line naming the option,
    where it used to create a local directory of that name; `./s3:relative` is the way to mean one."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text("docs: s3:d\n")
    r = subprocess.run([sys.executable, "-m", "rise_batch.cli", *argv], capture_output=True, text=True, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "a malformed URI" in lines[0] and "://" in lines[0], r.stderr
    assert not s3_dirs(tmp_path) and not [p for p in tmp_path.iterdir() if ":" in p.name]
    assert checked_path("--out", "./s3:relative", URI) == "./s3:relative"
