"""`--max-input-tokens` and `plan --target-usd`, checked against what the fake server then bills for the same run."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from rise_batch.cli import main
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.llm.pricing import PriceTable
from rise_batch.structuring.plan import make_plan
from tests.conftest import sample_rows, write_jsonl
from tests.structuring.test_plan import batch_run_on_fake

pytest.importorskip("bpe_openai")
MODEL = "gpt-5.4-nano"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("target") / "docs.jsonl", sample_rows(40))


def structure(tmp_path, corpus, server, **options) -> tuple[dict, dict, list[dict]]:
    stats, counted = batch_run_on_fake(tmp_path / "out", corpus, server, **options)
    parts = sorted((tmp_path / "out" / "checkpoint").glob("*.parquet"))
    rows = [r for f in parts for r in pq.read_table(f).to_pylist()]
    return stats, counted, rows


def test_max_input_tokens_cuts_what_is_billed_and_the_plan_prices_it_exactly(tmp_path, corpus, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "")
    plan = make_plan(corpus, MODEL, sample=40, max_input_tokens=800)
    with FakeLLMServer() as server:
        stats, counted, rows = structure(tmp_path, corpus, server, llm_max_input_tokens=800)
    assert plan["input_tokens"] == counted["prompt_tokens"]  # the same cut, the same request bodies, same encoding
    per_request = counted["prompt_tokens"] / counted["requests"]
    assert per_request <= 800 + plan["prompt_tokens"] + 200  # document at most 800 tokens + prompt + schema/framing
    cut = [r for r in rows if "input-truncated" in r["parse_note"]]
    assert len(cut) == round(plan["truncated_share"] * plan["requests"]) > 30
    assert plan["text_cut_share"] > 0.5


def test_target_usd_proposal_meets_the_budget_on_the_fake_servers_bill(tmp_path, corpus, monkeypatch, capsys) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "")
    full = make_plan(corpus, MODEL, sample=40)
    target = round(full["usd_batch"] * 0.4, 4)
    assert main(["plan", "--corpus", str(corpus), "--sample", "40", "--mode", "batch", "--target-usd", str(target),
                 "--json"]) == 0  # fmt: skip
    got = json.loads(capsys.readouterr().out)["target"]
    proposal = got["proposal"]
    assert got["margin"] == 0.05 and proposal["usd"] <= target * 0.95 and proposal["llm_text_share"] > 0.4
    options = {}
    if proposal["min_chars"]:
        options["tier"] = f"chars>={proposal['min_chars']}"
    if proposal["max_input_tokens"]:
        options["llm_max_input_tokens"] = proposal["max_input_tokens"]
    with FakeLLMServer() as server:
        stats, counted, rows = structure(tmp_path, corpus, server, **options)
    billed = PriceTable.load().cost(MODEL, counted["prompt_tokens"], 0, counted["completion_tokens"], batch=True)
    assert billed <= target * 1.12  # input exact, output modelled (see test_plan.py)
    llm_rows = [r for r in rows if r["tier"] == "llm" and r["outcome"] != "too-short"]
    assert len(llm_rows) == round(proposal["llm_docs_share"] * len(rows))
    text = {r["docid"]: len(r["text"]) for r in sample_rows(40)}
    assert sum(text[r["docid"]] for r in llm_rows) >= proposal["llm_text_share"] * sum(text.values())
    table = main(["plan", "--corpus", str(corpus), "--sample", "40", "--mode", "batch", "--target-usd", str(target)])
    out = capsys.readouterr().out
    assert table == 0 and "LLM structures" in out and "of the LLM documents' text cut" in out


def test_an_unreachable_target_is_a_one_line_error(corpus, capsys) -> None:
    code = main(["plan", "--corpus", str(corpus), "--sample", "10", "--target-usd", "0.000001"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "the cheapest" in err and "costs $" in err
    assert main(["plan", "--corpus", str(corpus), "--max-input-tokens", "0"]) == 2


def test_the_margin_holds_the_proposal_below_the_target_and_is_validated(corpus, capsys) -> None:
    args = ["plan", "--corpus", str(corpus), "--sample", "20", "--mode", "batch", "--json", "--target-usd"]
    full = make_plan(corpus, MODEL, sample=20)
    target = str(round(full["usd_batch"] * 0.6, 4))
    assert main([*args, target, "--target-margin", "0"]) == 0
    loose = json.loads(capsys.readouterr().out)["target"]
    assert main([*args, target, "--target-margin", "0.3"]) == 0
    tight = json.loads(capsys.readouterr().out)["target"]
    assert tight["budget_usd"] == pytest.approx(float(target) * 0.7)
    assert tight["proposal"]["usd"] <= tight["budget_usd"] < loose["budget_usd"]
    assert tight["proposal"]["usd"] <= loose["proposal"]["usd"]
    assert main([*args, target, "--target-margin", "1.5"]) == 2
    assert "--target-margin must be in [0, 1)" in capsys.readouterr().err
