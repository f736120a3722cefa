"""Structured outputs on the wire: the schemas are what OpenAI's own SDK builds, the client sends them, and a
server that refuses them is asked again without, once, over HTTP through the real openai client."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any, Literal

import jsonschema
import openai
import pytest
from openai.lib._parsing._completions import type_to_response_format_param
from pydantic import BaseModel

from rise_batch.config import LLMConfig
from rise_batch.eval.judge import GRADER_RESPONSE_FORMAT
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.llm.client import LLMClient, LLMError
from rise_batch.llm.errors import refuses_response_format
from rise_batch.structure.propose import DOC_CLOSE, DOC_OPEN, TOC_RESPONSE_FORMAT, build_messages
from tests.conftest import sample_rows


class Section(BaseModel):
    title: str
    description: str
    anchor: str


class TableOfContents(BaseModel):
    sections: list[Section]


class GraderVerdict(BaseModel):
    extracted_final_answer: str
    reasoning: str
    correct: Literal["yes", "no"]
    confidence: float


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """The SDK's schema with its $refs inlined and pydantic's titles dropped: the shape the provider enforces."""
    if isinstance(node, dict):
        if "$ref" in node:
            return _inline(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
        out = {k: _inline(v, defs) for k, v in node.items() if k not in ("title", "$defs", "properties")}
        if "properties" in node:  # property names are data (one is "title"): kept, their schemas inlined
            out["properties"] = {k: _inline(v, defs) for k, v in node["properties"].items()}
        return out
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


@pytest.mark.parametrize(
    ("ours", "model"), [(TOC_RESPONSE_FORMAT, TableOfContents), (GRADER_RESPONSE_FORMAT, GraderVerdict)]
)
def test_response_formats_are_what_the_openai_sdk_builds_for_the_same_shape(ours: dict, model: type) -> None:
    sdk = type_to_response_format_param(model)
    schema = sdk["json_schema"]["schema"]
    assert ours["type"] == sdk["type"] == "json_schema"
    assert ours["json_schema"]["strict"] is sdk["json_schema"]["strict"] is True
    assert ours["json_schema"]["schema"] == _inline(schema, schema.get("$defs", {}))


REFUSALS = [  # how providers word "no structured outputs here"
    "Error code: 400 - Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.",
    "Error code: 400 - Unsupported parameter: 'response_format'. In the Responses API, this parameter has moved",
    "Error code: 400 - Unrecognized request argument supplied: response_format",
    'Error code: 400 - response_format type must be one of "text" or "json_object", but got: json_schema',
    "Error code: 400 - This model does not support response format `json_schema`.",
    "Error code: 400 - This response_format type is unavailable now",
]
NOT_REFUSALS = [  # a 400 about something else must stay an error
    "Error code: 400 - This model's maximum context length is 128000 tokens.",
    "Error code: 400 - Invalid schema for response_format 'x': In context=(), 'additionalProperties' is required",
    "Error code: 400 - Invalid request (fake)",
]


def test_refusal_wordings_of_real_providers_are_recognised_and_nothing_else() -> None:
    assert all(refuses_response_format(400, m) for m in REFUSALS)
    assert refuses_response_format(422, "response_format: Extra inputs are not permitted")
    assert not any(refuses_response_format(400, m) for m in NOT_REFUSALS)
    assert not refuses_response_format(500, REFUSALS[0])  # a server error is retried, not a refusal


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as s:
        yield s


def _config(server: FakeLLMServer, **kw: Any) -> LLMConfig:
    return LLMConfig(base_url=server.base_url, rpm=100_000, tpm=100_000_000, max_attempts=2, **kw)


def _doc_messages(n: int) -> list[list[dict]]:
    return [build_messages(r["text"][:3000], "Propose sections as JSON.") for r in sample_rows(n)]


async def _chat_all(config: LLMConfig, messages: list[list[dict]], fmt: dict | None = TOC_RESPONSE_FORMAT):
    async with LLMClient(config, response_format=fmt) as client:
        replies = await asyncio.gather(*(client.chat(m) for m in messages))
    return replies, client.stats


def test_the_client_sends_the_schema_and_the_fake_obeys_it(server: FakeLLMServer) -> None:
    replies, stats = asyncio.run(_chat_all(_config(server), _doc_messages(4)))
    assert [e["response_format"] for e in server.log()] == ["json_schema"] * 4
    assert all(r.constrained for r in replies)
    for r in replies:  # the reply is valid under the schema the request carried (checked by jsonschema)
        jsonschema.validate(json.loads(r.text), TOC_RESPONSE_FORMAT["json_schema"]["schema"])
    assert stats.structured_output_disabled == 0 and stats.failures == 0


def test_no_structured_output_sends_no_schema(server: FakeLLMServer) -> None:
    replies, _ = asyncio.run(_chat_all(_config(server, structured_output=False), _doc_messages(2)))
    assert [e["response_format"] for e in server.log()] == [None, None]
    assert not any(r.constrained for r in replies)


def test_a_refusing_server_switches_the_schema_off_once_with_a_warning(server: FakeLLMServer, caplog) -> None:
    server.configure(response_format="refuse")
    messages = _doc_messages(6)
    with caplog.at_level(logging.WARNING, logger="rise_batch.llm.client"):
        first, stats = asyncio.run(_chat_all(_config(server, concurrency=1), messages[:1]))
    log = server.log()
    assert [(e["status"], e["response_format"]) for e in log] == [(400, "json_schema"), (200, None)]
    assert first[0].text and not first[0].constrained
    assert stats.structured_output_disabled == 1 and stats.structured_output_refused == 1
    assert stats.calls == 1 and stats.failures == 0  # the refused request is neither a failed nor a second call
    warned = [r for r in caplog.records if "refused structured outputs" in r.getMessage()]
    assert len(warned) == 1 and "--no-structured-output" in warned[0].getMessage()


def test_concurrent_refusals_all_recover_and_later_calls_send_no_schema(server: FakeLLMServer) -> None:
    server.configure(response_format="refuse")

    async def main() -> tuple[list, list, Any]:
        async with LLMClient(_config(server), response_format=TOC_RESPONSE_FORMAT) as client:
            burst = await asyncio.gather(*(client.chat(m) for m in _doc_messages(5)))
            later = [await client.chat(m) for m in _doc_messages(3)]
        return burst, later, client.stats

    burst, later, stats = asyncio.run(main())
    assert all(r.text for r in burst + later) and not any(r.constrained for r in burst + later)
    refused = [e for e in server.log() if e["status"] == 400]
    assert 1 <= len(refused) <= 5 and stats.structured_output_refused == len(refused)
    assert stats.structured_output_disabled == 1 and stats.failures == 0
    assert [e["response_format"] for e in server.log()[-3:]] == [None, None, None]


def test_another_400_is_not_taken_for_a_refusal(server: FakeLLMServer) -> None:
    server.configure(p400=1.0)
    with pytest.raises(LLMError, match="Invalid request"):
        asyncio.run(_chat_all(_config(server), _doc_messages(1)))
    assert len(server.log()) == 1  # not sent again without the schema


def test_the_fake_checks_strict_schemas_as_openai_does(server: FakeLLMServer) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="x")
    messages = [{"role": "user", "content": DOC_OPEN + "Some text here.\n" * 20 + DOC_CLOSE}]
    loose = {"type": "object", "properties": {"sections": {"type": "array"}}, "required": ["sections"]}
    bad = {"type": "json_schema", "json_schema": {"name": "toc", "strict": True, "schema": loose}}
    with pytest.raises(openai.BadRequestError, match="additionalProperties"):
        client.chat.completions.create(model="gpt-5.4-nano", messages=messages, response_format=bad)
    missing = {**TOC_RESPONSE_FORMAT["json_schema"]["schema"], "required": []}
    bad = {"type": "json_schema", "json_schema": {"name": "toc", "strict": True, "schema": missing}}
    with pytest.raises(openai.BadRequestError, match="required"):
        client.chat.completions.create(model="gpt-5.4-nano", messages=messages, response_format=bad)
    ok = client.chat.completions.create(model="gpt-5.4-nano", messages=messages, response_format=TOC_RESPONSE_FORMAT)
    assert ok.choices[0].message.content.startswith('{"sections"')
    server.configure(response_format="refuse")
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="gpt-5.4-nano", messages=messages, response_format=TOC_RESPONSE_FORMAT)
    assert refuses_response_format(refused.value.status_code, str(refused.value))
