"""`rise-batch plan`: estimates checked against the tokens the fake server then counts for the same corpus."""

from __future__ import annotations

import json
import math

import pytest

from rise_batch.cli import main
from rise_batch.config import load_structure_config
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.structuring.job import run_structure
from rise_batch.structuring.plan import make_plan, sample_docs
from tests.conftest import sample_rows, write_jsonl


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("plan") / "docs.jsonl", sample_rows(60))


def batch_run_on_fake(out, corpus, server: FakeLLMServer, **options) -> tuple[dict, dict]:
    """`structure --mode batch` against the fake server: the run's stats and what the server counted."""
    cfg = load_structure_config(
        None,
        corpus=str(corpus),
        out=str(out),
        backend="llm",
        mode="batch",
        progress=False,
        llm_base_url=server.base_url,
        batch_poll_s=0.01,
        **options,
    )
    return run_structure(cfg), server.stats()


def test_plan_is_within_10_percent_of_what_the_fake_server_counts(tmp_path, corpus, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "")
    plan = make_plan(corpus, "gpt-5.4-nano", sample=60)
    with FakeLLMServer() as server:
        stats, counted = batch_run_on_fake(tmp_path / "out", corpus, server)
    assert stats["reasks"] == 0 and plan["requests"] == stats["llm_calls"] == 60
    # input: the same request bodies (JSON schema included) counted with the same o200k encoding the fake server
    # bills, so the estimate is exact; output: modelled from length, fitted on wiki2015 (bench/plan_accuracy.py,
    # within 2% there); these bundled articles are twice as long and measure 10% under, hence the wider bound
    assert plan["input_tokens"] == counted["prompt_tokens"]
    assert plan["token_count"].startswith("o200k_base")
    assert abs(plan["output_tokens"] / counted["completion_tokens"] - 1) < 0.12
    assert abs(plan["usd_batch"] / stats["cost_usd"] - 1) < 0.12


def test_dollars_hours_scaling_tier_and_input_cut(corpus) -> None:
    p = make_plan(corpus, "gpt-5.4-nano", sample=60, n_docs=1_000_000, rpm=1000, tpm=1_000_000)
    assert p["docs"] == 1_000_000 and p["requests"] == 1_000_000
    assert p["usd_batch"] == pytest.approx(p["usd_online"] / 2)
    minutes = max(p["requests"] / 1000, (p["input_tokens"] + p["output_tokens"]) / 1_000_000)
    assert p["hours_online"] == pytest.approx(minutes / 60)
    assert not p["prompt_cached"] and p["cached_input_tokens"] == 0  # a ~620-token prompt is below the cache minimum
    assert p["batch_files"] == math.ceil(p["requests"] / p["batch_requests_per_file"])
    long_only = make_plan(corpus, "gpt-5.4-nano", sample=60, tier="chars>=30000")
    assert long_only["requests"] == sum(len(r["text"]) >= 30000 for r in sample_rows(60))
    cut = make_plan(corpus, "gpt-5.4-nano", sample=60, max_input_chars=5000)
    assert cut["truncated_share"] > 0.8 and cut["input_tokens_per_request"] < (5000 + 2600) / 4 + 12


def test_sampling_reads_runs_of_rows_from_every_format(tmp_path, corpus) -> None:
    from tests.conftest import write_parquet

    rows = sample_rows(60)
    pq = write_parquet(tmp_path / "docs.parquet", rows, row_group_size=7)
    for path in (corpus, pq):
        docs, total = sample_docs(path, 20, seed=3)
        assert total == 60 and len(docs) == 20 and len({d.docid for d in docs}) == 20
        texts = {r["docid"]: r["text"] for r in rows}
        assert all(texts[d.docid] == d.text for d in docs)
    assert sample_docs(pq, 20, seed=3)[0] == sample_docs(pq, 20, seed=3)[0]


def test_cli_prints_the_table_and_json(corpus, capsys) -> None:
    assert main(["plan", "--corpus", str(corpus), "--sample", "10", "--docs", "1000000", "--mode", "batch"]) == 0
    table = capsys.readouterr().out
    assert "cost (USD)" in table and "batch" in table and "1,000,000" in table
    assert main(["plan", "--corpus", str(corpus), "--sample", "10", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sampled_docs"] == 10 and data["usd_online"] > data["usd_batch"] > 0


def test_an_unpriced_model_is_refused_and_a_prices_file_prices_it(corpus, tmp_path, capsys) -> None:
    """A plan in dollars of a model without a price is refused as --max-cost refuses it (it used to warn and print
    $0); --prices-file gives the price, as for `structure`."""
    argv = ["plan", "--corpus", str(corpus), "--sample", "10", "--model", "my-own-model", "--json"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "'my-own-model'" in err[0] and "--prices-file" in err[0] and not captured.out
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  my-own-model: {input: 0.2, cached_input: 0.02, output: 1.25}\n")
    assert main([*argv, "--prices-file", str(prices)]) == 0
    assert json.loads(capsys.readouterr().out)["usd_online"] > 0


def skewed_rows(n: int, seed: int = 7) -> list[dict]:
    """Documents with a heavy-tailed (lognormal) length, some of them digit-heavy (more tokens per byte), like a
    web corpus: the length distribution that makes scaling a small sample up swing."""
    import random

    rng = random.Random(seed)
    words = "the of river county album was born in and season film species village team war music".split()
    rows = []
    for i in range(n):
        target = int(min(60_000, 300 + rng.lognormvariate(7.3, 1.1)))
        digits = rng.random() < 0.3
        lines, size = [f"Title {i}"], 0
        while size < target:
            line = " ".join(
                str(rng.randrange(10**6)) if digits and rng.random() < 0.5 else rng.choice(words) for _ in range(25)
            )
            lines.append(line)
            size += len(line) + 1
        rows.append({"docid": f"d{i}", "text": "\n".join(lines)})
    return rows


@pytest.fixture(scope="module")
def skewed(tmp_path_factory):
    from tests.conftest import write_parquet

    rows = skewed_rows(1200)
    return write_parquet(tmp_path_factory.mktemp("skewed") / "docs.parquet", rows, row_group_size=300), rows


def test_regression_on_footer_bytes_beats_simple_scaling_over_seeds(skewed) -> None:
    """The plan's estimate vs simple scaling of the same sample (computed here from sample_docs and estimate_doc),
    against the whole corpus priced document by document, over 10 seeds: the regression on the text bytes the
    Parquet footers give for free must at least halve the error."""
    from rise_batch.prompts import load_prompt
    from rise_batch.structuring.plan import estimate_doc

    path, rows = skewed
    truth = make_plan(path, "gpt-5.4-nano", sample=len(rows))  # every row read: no sampling error
    assert truth["sampled_docs"] == len(rows) and truth["sampling"].startswith("every row")
    prompt = load_prompt("structure_toc.txt")
    plan_errors, simple_errors = [], []
    for seed in range(10):
        plan = make_plan(path, "gpt-5.4-nano", sample=150, seed=seed)
        assert plan["sampling"].startswith("regression on text bytes")
        docs, total = sample_docs(path, 150, seed=seed)
        simple = sum(estimate_doc(d, prompt).input_tokens for d in docs) * total / len(docs)
        plan_errors.append(plan["input_tokens"] / truth["input_tokens"] - 1)
        simple_errors.append(simple / truth["input_tokens"] - 1)
    rms = [math.sqrt(sum(e * e for e in errors) / len(errors)) for errors in (plan_errors, simple_errors)]
    assert rms[0] < rms[1] / 2, (rms, plan_errors, simple_errors)
    assert max(map(abs, plan_errors)) < max(map(abs, simple_errors)) / 1.5, (rms, plan_errors, simple_errors)


def test_footer_byte_total_is_the_text_bytes(skewed, tmp_path) -> None:
    from rise_batch.structuring.plan_sample import parquet_text_bytes
    from tests.conftest import write_parquet

    path, rows = skewed
    exact = sum(len(r["text"].encode()) for r in rows)
    assert abs(parquet_text_bytes(path) / exact - 1) < 0.005  # page headers hold min/max text: 0.35% at 1 MB chunks
    renamed = write_parquet(tmp_path / "r.parquet", [{"id": r["docid"], "contents": r["text"]} for r in rows])
    assert abs(parquet_text_bytes(renamed, "docid=id,text=contents") / exact - 1) < 0.005
    assert parquet_text_bytes(write_jsonl(tmp_path / "d.jsonl", rows[:5])) is None  # no footer: no total


def test_footers_that_disagree_with_the_sample_fall_back_to_simple_scaling(tmp_path) -> None:
    """Long texts repeated many times are dictionary-encoded once, so the footer understates the bytes: the plan
    must notice (the sample's mean bytes are far above the footer's) and scale simply, saying why."""
    from tests.conftest import write_parquet

    rows = skewed_rows(40)
    dup = [{"docid": f"x{i}", "text": rows[i % 4]["text"] * 3} for i in range(400)]
    path = write_parquet(tmp_path / "dup.parquet", dup)
    plan = make_plan(path, "gpt-5.4-nano", sample=100, seed=1)
    assert plan["sampling"].startswith("simple scaling") and "footer" in plan["sampling"]
    jsonl = make_plan(write_jsonl(tmp_path / "d.jsonl", rows), "gpt-5.4-nano", sample=20)
    assert jsonl["sampling"].startswith("simple scaling")


def test_target_grid_uses_the_same_weights(skewed) -> None:
    """`plan --target-usd` prices its grid with the plan's weights: a tier rule's dollars over 10 seeds err less
    than with even weights, against the whole corpus priced document by document."""
    from rise_batch.llm.pricing import PriceTable
    from rise_batch.prompts import load_prompt
    from rise_batch.structuring.plan_sample import plan_sample
    from rise_batch.structuring.plan_target import price_options

    path, rows = skewed
    prompt, prices = load_prompt("structure_toc.txt"), PriceTable.load()
    everything = price_options(
        sample_docs(path, len(rows))[0], prompt, "gpt-5.4-nano", n_docs=len(rows), batch=True, prices=prices
    )
    truth = {(o.min_chars, o.max_input_tokens): o.usd for o in everything}
    errors: dict[bool, list[float]] = {True: [], False: []}
    for seed in range(10):
        drawn = plan_sample(path, 150, seed)
        for weighted in (True, False):
            options = price_options(
                drawn.docs,
                prompt,
                "gpt-5.4-nano",
                n_docs=len(rows),
                batch=True,
                prices=prices,
                weights=drawn.weights if weighted else None,
            )
            no_rule = next(o for o in options if o.min_chars == 0 and o.max_input_tokens is None)
            errors[weighted].append(no_rule.usd / truth[(0, None)] - 1)
    rms = {k: math.sqrt(sum(e * e for e in v) / len(v)) for k, v in errors.items()}
    assert rms[True] < rms[False] / 2, errors
