"""The fake server bills real tokens: o200k for gpt-5.x over HTTP through the real openai client, the schema of a
`response_format` included; chars/4 only for a model with no known encoding. Expected counts come from
bpe-openai's tiktoken-compatible `Encoding` class, not from the counter the server uses."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest

from rise_batch.fake_llm import FakeLLMServer
from tests.conftest import sample_rows

bpe_openai = pytest.importorskip("bpe_openai")

SYSTEM = "Split the document into sections; answer in JSON."
SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "toc",
        "strict": True,
        "schema": {"type": "object", "properties": {}, "additionalProperties": False},  # strict: OpenAI requires it
    },
}


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as s:
        yield s


def o200k(text: str) -> int:
    return len(bpe_openai.get_encoding("o200k_base").encode(text))


def test_prompt_and_completion_tokens_are_o200k_counts(server: FakeLLMServer) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="x")
    doc = sample_rows(3)[2]["text"]
    user = f"<document>\n{doc}\n</document>"
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
    reply = client.chat.completions.create(model="gpt-5.4-nano", messages=messages)
    expected = o200k(SYSTEM) + o200k(user) + 2 * 3 + 3  # 3 per message, 3 priming the reply
    assert reply.usage.prompt_tokens == expected
    assert reply.usage.prompt_tokens < 0.95 * (len(SYSTEM) + len(user)) / 4  # not the old chars/4 bill
    assert reply.usage.completion_tokens == o200k(reply.choices[0].message.content)

    constrained = client.chat.completions.create(model="gpt-5.4-nano", messages=messages, response_format=SCHEMA)
    schema_tokens = o200k(json.dumps(SCHEMA, separators=(",", ":")))
    assert constrained.usage.prompt_tokens == expected + schema_tokens


def test_unknown_model_is_billed_chars_over_4(server: FakeLLMServer) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="x")
    user = "<document>\n" + "word " * 400 + "\n</document>"
    reply = client.chat.completions.create(model="my-local-model", messages=[{"role": "user", "content": user}])
    assert reply.usage.prompt_tokens == -(-len(user) // 4) + 3 + 3
