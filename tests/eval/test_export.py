"""Gold read three ways gives one gold_R in `run`'s trajectories and in the report, and `export bcp` writes run
files with every field BrowseComp-Plus's evaluation scripts read, checked as those scripts check them.

Runs are real (`rise-batch run`, rise system, bubblewrap, the fake server over HTTP through the openai client).
The BCP checks re-implement what scripts_evaluation/evaluate_run.py and evaluate_with_openai.py read from a run
file (fields, types, the `[docid]` citation patterns); their code is not copied here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rise_batch.cli import main
from rise_batch.eval.export import cite
from tests.agent.conftest import agent_world, fake_server  # noqa: F401  (fixtures)
from tests.agent.helpers import read_trajectories, run_dir, title_query

N = 3


def run_args(queries: Path, out: Path, base_url: str, *extra: str) -> list[str]:
    from tests.agent.helpers import world

    w = world()
    return [
        "run", "--queries", str(queries), "--system", "rise", "--docs", str(w.docs), "--index", str(w.index),
        "--out", str(out), "--workers", "0", "--index-backend", "numpy", "--no-progress", "--base-url", base_url,
        "--model", "gpt-5.4-mini", "--rpm", "1000000", "--tpm", "10000000000", *extra,
    ]  # fmt: skip


def shapes(world: Any, root: Path) -> tuple[dict[str, list[str]], list[str]]:
    """Query files for the same gold (each query's own document) in three shapes, and the query ids."""
    items = list(world.titles.items())[:N]
    decoy = list(world.titles)[N]
    rows = [title_query(d, t) for d, t in items]
    bcp = [
        {k: v for k, v in r.items() if k != "gold_doc_ids"}
        | {"gold_docs": [{"docid": decoy}], "evidence_docs": [{"docid": r["query_id"], "text": "..."}]}
        for r in rows
    ]
    (root / "bcp.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bcp))
    (root / "ids.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "q.tsv").write_text("".join(f"{r['query_id']}\t{r['query']}\n" for r in rows))
    (root / "qrels.txt").write_text("".join(f"{r['query_id']} 0 {r['query_id']} 1\n" for r in rows))
    return {
        "bcp": [str(root / "bcp.jsonl"), "--gold", "evidence"],
        "ids": [str(root / "ids.jsonl")],
        "qrels": [str(root / "q.tsv"), "--qrels", str(root / "qrels.txt")],
    }, [r["query_id"] for r in rows]


def report_of(run: Path, out: Path, *extra: str) -> dict[str, Any]:
    assert main(["report", str(run), "--out", str(out), *extra]) == 0
    return json.loads((out / "report.json").read_text())["runs"][0]


def test_run_and_report_give_one_gold_R_for_three_shapes(agent_world, fake_server, capsys):  # noqa: F811
    root = run_dir("three-shapes")
    files, qids = shapes(agent_world, root)
    gold_r = {}
    for shape, (queries, *flags) in files.items():
        args = run_args(Path(queries), root / shape, fake_server.base_url, *flags)
        assert main(args) == 0, capsys.readouterr().err
        trajs = read_trajectories(root / shape)
        assert {q: t["gold_doc_ids"] for q, t in trajs.items()} == {q: [q] for q in qids}, shape
        summary = report_of(root / shape, root / f"report-{shape}")
        gold_r[shape] = (summary["gold_R"], summary["cov_mean"], [p["gold_R"] for p in summary["per_query"]])
    assert gold_r["bcp"] == gold_r["ids"] == gold_r["qrels"]
    assert gold_r["ids"][0] == 1.0  # the scripted agent finds each query's own document: the figure is measured
    # the decoy gold_docs of the BCP file, chosen on purpose, give another gold_R: the choice is honoured
    assert report_of(root / "bcp", root / "r-q", "--qrels", str(root / "qrels.txt"))["gold_R"] == 1.0
    (root / "decoy.txt").write_text("".join(f"{q} 0 {list(agent_world.titles)[N]} 1\n" for q in qids))
    assert report_of(root / "ids", root / "r-d", "--qrels", str(root / "decoy.txt"))["gold_R"] < 1.0
    capsys.readouterr()
    # resuming with another gold skips every trajectory (no model call) and gives them the new gold
    calls = fake_server.stats()["requests"]
    assert main(run_args(root / "q.tsv", root / "qrels", fake_server.base_url, "--qrels", str(root / "decoy.txt"))) == 0
    assert "3 finished trajectories now carry qrels decoy.txt" in capsys.readouterr().out
    assert fake_server.stats()["requests"] == calls
    assert report_of(root / "qrels", root / "r-q2")["gold"] == "qrels decoy.txt"


# What BCP's evaluation scripts read from each *.json of --input_dir, with the types they rely on.
def bcp_check(run_file: dict[str, Any], ground_truth: dict[str, str]) -> list[str]:
    """Problems BCP's scripts would hit with one run file (empty when none)."""
    problems = []
    qid = run_file.get("query_id")
    if not qid or str(qid) not in ground_truth:
        problems.append(f"query_id {qid!r} has no ground truth")  # the scripts skip such a file
    if not isinstance(run_file.get("status"), str):
        problems.append("status is not a string")  # run_data["status"] == "completed"
    result = run_file.get("result")
    if not isinstance(result, list) or not all(isinstance(r, dict) and "type" in r for r in result):
        problems.append("result is not a list of typed items")  # run_data["result"][-1]["type"]
    elif result and result[-1]["type"] == "output_text" and not isinstance(result[-1].get("output"), str):
        problems.append("the final output_text has no string output")
    if run_file.get("status") == "completed" and not (result and result[-1]["type"] == "output_text"):
        problems.append("completed without a final output_text item")
    docids = run_file.get("retrieved_docids")
    if not isinstance(docids, list) or not all(isinstance(d, str) for d in docids):
        problems.append("retrieved_docids is not a list of strings")  # set(...) against qrels docids (strings)
    counts = run_file.get("tool_call_counts")
    if not isinstance(counts, dict) or not all(isinstance(v, int) for v in counts.values()):
        problems.append("tool_call_counts is not a dict of ints")  # summed and averaged per tool
    meta = run_file.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("model"), str) or not meta["model"]:
        problems.append("metadata.model is missing")  # labels the summary's LLM
    return problems


def bracketed(text: str) -> set[str]:
    """Everything cited in brackets, the way BCP's scripts find citations (they keep the digits of it)."""
    return set(re.findall(r"\[([^\[\]]*?)\]", text)) | set(re.findall(r"【([^【】]*?)】", text))


def test_export_bcp_has_every_field_bcp_reads(agent_world, fake_server, capsys):  # noqa: F811
    from rise_batch.space.docstore import load_docmap

    root = run_dir("export-bcp")
    files, qids = shapes(agent_world, root)
    assert main(run_args(Path(files["ids"][0]), root / "run", fake_server.base_url)) == 0
    assert main(run_args(Path(files["ids"][0]), root / "short", fake_server.base_url, "--max-calls", "1")) == 0
    capsys.readouterr()
    ground_truth = {q: "answer" for q in qids}
    relpath = load_docmap(agent_world.docs)
    for name, status in (("run", "completed"), ("short", "incomplete")):
        out = root / f"bcp-{name}"
        assert main(["export", "bcp", str(root / name), "--out", str(out)]) == 0
        assert f"{N} run files in {out}" in capsys.readouterr().out
        exported = {p.name: json.loads(p.read_text()) for p in out.glob("*.json")}  # what the scripts glob
        assert len(exported) == N and not [p for p in out.iterdir() if p.suffix != ".json"]
        trajs = read_trajectories(root / name)
        for run_file in exported.values():
            assert bcp_check(run_file, ground_truth) == []
            t = trajs[run_file["query_id"]]
            assert run_file["status"] == status and run_file["metadata"]["model"] == "gpt-5.4-mini"
            assert (
                run_file["retrieved_docids"] == t["retrieved_docids"]
                and run_file["tool_call_counts"] == t["tool_calls"]
            )
            assert [r["tool_name"] for r in run_file["result"] if r["type"] == "tool_call"] == [
                s["tool"] for s in t["steps"]
            ]
            if status == "completed":
                answer = run_file["result"][-1]["output"]
                read = [s["arguments"]["path"] for s in t["steps"] if s["tool"] == "read"][-1]
                assert read in t["final_text"], "the scripted agent cites the file it read"
                docid = next(d for d, r in relpath.items() if r == read)
                assert docid in bracketed(answer) and read not in answer
            else:
                assert all(r["type"] != "output_text" for r in run_file["result"])
    # an --out already holding .json files would be read by BCP as run files too: refused unless --force
    assert main(["export", "bcp", str(root / "run"), "--out", str(root / "bcp-short")]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["export", "bcp", str(root / "run"), "--out", str(root / "bcp-short"), "--force"]) == 0
    assert all(json.loads(p.read_text())["status"] == "completed" for p in (root / "bcp-short").glob("*.json"))
    # without a docmap the citations cannot be mapped: refused, naming the remedy, nothing written
    code = main(["export", "bcp", str(root / "run"), "--out", str(root / "none"), "--docs", str(root)])
    assert code == 2 and "pass --docs DIR" in capsys.readouterr().err and not (root / "none").exists()


def test_cite_maps_paths_and_bare_docids():
    m = {"en.wikipedia.org/Lyon.txt": "101", "en.wikipedia.org/Lyon (city).txt": "102"}
    text = (
        "See en.wikipedia.org/Lyon.txt, [en.wikipedia.org/Lyon (city).txt] and /ws/q/en.wikipedia.org/Lyon.txt; "
        "not fr.en.wikipedia.org/Lyon.txt nor en.wikipedia.org/Lyon.txt.bak"
    )
    assert cite(text, m) == (
        "See [101], [102] and [101]; not fr.en.wikipedia.org/Lyon.txt nor en.wikipedia.org/Lyon.txt.bak"
    )
    assert cite("docid 101 and [102], not 1010", m, bare_docids=True) == "docid [101] and [102], not 1010"
    assert cite("nothing", {}) == "nothing"
