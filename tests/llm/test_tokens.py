"""Token counts: real encodings for known models (checked against tiktoken's published ids), chars/4 only for
unknown models or without bpe-openai (said once), a cheap estimate for the limiter, and a token-exact cut."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rise_batch.llm.tokens import ESTIMATE_CHARS, TokenCounter, counter_for, encoding_for_model
from tests.conftest import REPO, sample_rows

pytest.importorskip("bpe_openai")  # the test extra installs it; the fallback is tested in a subprocess below


def test_models_map_to_their_encodings() -> None:
    for model in ("gpt-5.4-nano", "gpt-5.1", "gpt-4o-mini", "gpt-4.1", "o3-mini", "o1", "ft:gpt-4o-mini:org::x"):
        assert encoding_for_model(model) == "o200k_base", model
    for model in ("gpt-4", "gpt-4-turbo", "gpt-3.5-turbo"):
        assert encoding_for_model(model) == "cl100k_base", model
    for model in ("llama-3-70b", "fake-model", "omni-moderation-latest"):
        assert encoding_for_model(model) is None, model


def test_counts_equal_the_published_tokenizations() -> None:
    # tiktoken's README and OpenAI's cookbook: cl100k "tiktoken is great!" -> [83, 1609, 5963, 374, 2294, 0]
    assert counter_for("gpt-4").count("tiktoken is great!") == 6
    nano = counter_for("gpt-5.4-nano")
    assert nano.name == "o200k_base" and nano.exact
    assert nano.count("hello world") == 2 and nano.count("") == 0
    text = "\n".join(r["text"] for r in sample_rows(20))
    # o200k cuts English Wikipedia well below chars/4: the old estimate overstated input by more than 5%
    assert nano.count(text) < 0.95 * len(text) / 4


def test_unknown_model_falls_back_to_chars_over_4_and_says_so_once(caplog) -> None:
    counter_for.cache_clear()
    with caplog.at_level("WARNING", logger="rise_batch.llm.tokens"):
        a, b = counter_for("my-local-llama"), counter_for("my-local-llama")
    assert a is b and a.name == "chars/4" and not a.exact and a.count("x" * 9) == 3
    assert sum("my-local-llama" in r.getMessage() for r in caplog.records) == 1


def python(code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter (what it imports is then its own doing); it must succeed."""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def test_without_the_package_counts_chars_over_4_and_names_the_remedy() -> None:
    code = (
        "import sys, logging; sys.modules['bpe_openai'] = None; logging.basicConfig()\n"
        "from rise_batch.llm.tokens import counter_for\n"
        "c = counter_for('gpt-5.4-nano'); counter_for('gpt-5.4-nano')\n"
        "print(c.name, c.count('x' * 10))\n"
    )
    done = python(code)
    assert done.stdout.split() == ["chars/4", "3"]
    assert done.stderr.count("pip install 'rise_batch[tokens]'") == 1


def test_request_counts_messages_framing_and_schema() -> None:
    nano = counter_for("gpt-5.4-nano")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello world"}]
    assert nano.messages(messages) == nano.count("Be brief.") + 2 + 2 * 3 + 3
    schema = {"type": "json_schema", "json_schema": {"name": "toc", "schema": {"type": "object"}}}
    body = {"model": "gpt-5.4-nano", "messages": messages, "response_format": schema}
    assert nano.request(body) > nano.request({"model": "gpt-5.4-nano", "messages": messages})


def test_an_assistant_turns_tool_call_arguments_are_counted_in_later_prompts() -> None:
    """They are in the prompt of every later turn: a worst case without them undercounts an agent's requests."""
    args = '{"command": "rg -i -F \'political philosophy of self-governed societies\' | head -40"}'
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": args}}
    for counter in (counter_for("gpt-5.4-mini"), TokenCounter("chars/4")):
        bare = counter.messages([{"role": "assistant", "content": None}])
        with_call = counter.messages([{"role": "assistant", "content": None, "tool_calls": [call]}])
        assert with_call - bare >= counter.count(args)


def test_the_limiter_estimate_is_close_and_cheaper_on_a_40kB_document(monkeypatch) -> None:
    nano = counter_for("gpt-5.4-nano")
    doc = "\n".join(r["text"] for r in sample_rows(40))[:40_000]
    assert abs(nano.estimate(doc) / nano.count(doc) - 1) < 0.15
    assert nano.estimate(doc[:ESTIMATE_CHARS]) == nano.count(doc[:ESTIMATE_CHARS])  # short texts: exact

    # what makes it cheaper (by how much: bench/README.md's retired token_estimate): it encodes a prefix only
    counted: list[int] = []
    count = nano.count
    monkeypatch.setattr(nano, "count", lambda text: counted.append(len(text)) or count(text))
    nano.estimate(doc)
    assert counted == [ESTIMATE_CHARS] and ESTIMATE_CHARS < len(doc) / 4


def test_cut_keeps_a_prefix_within_the_token_budget() -> None:
    nano = counter_for("gpt-5.4-nano")
    text = "héllo 日本語のテキスト 🎉🎉 done\n" * 200
    for n in (1, 7, 9, 11, 100, 1000):
        prefix = nano.cut(text, n)
        assert text.startswith(prefix) and nano.count(prefix) <= n and nano.count(text[: len(prefix) + 2]) > n - 4
    assert nano.cut("short", 10) == "short"
    from bpe_openai import get_encoding  # the long path encodes a prefix only: same answer as the whole text

    enc = get_encoding("o200k_base")
    doc = "\n".join(r["text"] for r in sample_rows(10))
    for n in (50, 1000, 3000):
        assert nano.cut(doc, n) == enc.decode(enc.encode(doc)[:n])
    assert TokenCounter("chars/4").cut("abcdefghij", 2) == "abcdefgh"


def test_the_counter_loads_the_tokenizer_alone_and_counts_as_the_package_does() -> None:
    """The package's own import decodes cl100k_base's whole rank file in Python (bpe_openai.compat, ~1 s of CPU in
    every worker process) before anything is counted; the counter loads the Rust extension alone. Its counts are the
    package's (imported afterwards, in the same process: the extension initialises once and both share it)."""
    code = (
        "import sys\n"
        "from rise_batch.llm.tokens import counter_for\n"
        "c = counter_for('gpt-5.4-nano')\n"
        "print(c.exact, 'bpe_openai.compat' in sys.modules, 'bpe_openai.registry' in sys.modules)\n"
        "texts = ['hello world', 'tiktoken is great!', 'héllo 日本語のテキスト 🎉 done\\n' * 50]\n"
        "from bpe_openai import get_encoding\n"
        "enc = get_encoding('o200k_base')\n"
        "same = all(c.count(t) == len(enc.encode(t)) for t in texts)\n"
        "print(same, counter_for('gpt-4').count('tiktoken is great!'))\n"
    )
    assert python(code).stdout.split() == ["True", "False", "False", "True", "6"]
