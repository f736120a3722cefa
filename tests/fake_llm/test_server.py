"""The fake OpenAI-compatible server: its proposals, usage, faults, limits, admin endpoints and CLI."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from rise_batch.fake_llm import FakeLLMServer, FaultConfig
from rise_batch.fake_llm.faults import choose_fault
from rise_batch.fake_llm.http import HttpResponse, json_response
from rise_batch.fake_llm.structuring import body_start, extract_document, propose_sections
from tests.conftest import sample_rows
from tests.fake_llm.helpers import cli_refusal, cli_server

SYSTEM = "Split the document into sections; answer in JSON."


def chat_body(doc: str, system: str = SYSTEM, **extra: Any) -> dict[str, Any]:
    user = f"<document>\n{doc}\n</document>"
    return {
        "model": "gpt-5.4-nano",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
    } | extra


def http(url: str, body: Any = None, *, method: str | None = None, headers: dict[str, str] | None = None):
    """(status, parsed JSON body, headers) of one request; errors are returned, not raised."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as s:
        yield s


def test_proposals_on_real_articles_are_valid_verbatim_and_ordered() -> None:
    for row in sample_rows():
        text = row["text"]
        sections = propose_sections(text)
        body = text[body_start(text) :]
        flat = " ".join(body.split())
        assert sections, row["docid"]
        at = -1
        for s in sections:
            assert s["title"] and len(s["title"].split()) <= 7
            assert 1 <= len(s["description"].split()) <= 25
            assert 6 <= len(s["anchor"].split()) <= 12
            at = flat.find(s["anchor"], at + 1)  # verbatim up to whitespace, after the previous anchor
            assert at >= 0, (row["docid"], s["anchor"])
        assert propose_sections(text) == sections  # deterministic
    long_docs = [r["text"] for r in sample_rows() if len(r["text"]) > 5000]
    assert sum(len(propose_sections(t)) >= 2 for t in long_docs) == len(long_docs)


def test_document_extraction_and_frontmatter() -> None:
    assert extract_document("Please:\n<document>\nA\n</document>\n<document> trailing") == "A"
    assert extract_document("<document>\n\n</document>") == ""
    assert extract_document("no document here") is None
    assert body_start("---\ntitle: t\n---\nBody") == len("---\ntitle: t\n---\n")
    assert body_start("Body only") == 0
    prose = "\n\n".join(f"Paragraph {i} has a handful of ordinary words in it for testing." for i in range(400))
    assert 2 <= len(propose_sections(prose)) <= 12  # no headings: evenly spaced paragraph starts


def test_completion_shape_usage_and_prompt_cache(server: FakeLLMServer) -> None:
    doc = sample_rows(1)[0]["text"]
    status, body, headers = http(server.base_url + "/chat/completions", chat_body(doc))
    assert status == 200 and body["object"] == "chat.completion" and body["model"] == "gpt-5.4-nano"
    content = body["choices"][0]["message"]["content"]
    assert json.loads(content)["sections"]
    usage = body["usage"]
    chars = len(SYSTEM) + len(doc) + len("<document>\n\n</document>")
    assert chars / 6 <= usage["prompt_tokens"] <= chars / 4  # real o200k tokens (tests/fake_llm/test_billing.py)
    assert usage["completion_tokens"] >= len(content) // 6
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    assert "x-ratelimit-limit-requests" not in headers  # no limits configured, no headers
    _, again, _ = http(server.base_url + "/chat/completions", chat_body(doc[:5000]))
    assert 0 < again["usage"]["prompt_tokens_details"]["cached_tokens"] <= len(SYSTEM) // 4 + 5
    _, other, _ = http(server.base_url + "/chat/completions", chat_body(doc[:5000], system="Another prompt."))
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_fault_draws_are_deterministic_per_key_and_attempt() -> None:
    cfg = FaultConfig(p429=0.2, p500=0.05, p_hang=0.05, p_malformed=0.05, p_empty=0.05, seed=7)
    draws = [choose_fault(cfg, f"doc{i}", a) for i in range(2000) for a in range(2)]
    assert draws == [choose_fault(cfg, f"doc{i}", a) for i in range(2000) for a in range(2)]
    counts = Counter(draws)
    assert 700 <= counts["429"] <= 900 and 120 <= counts["500"] <= 280 and counts[None] > 2000
    assert draws != [choose_fault(cfg.updated({"seed": 8}), f"doc{i}", a) for i in range(2000) for a in range(2)]
    capped = cfg.updated({"p429": 0.75, "max_faults_per_key": 1})
    assert all(choose_fault(capped, f"doc{i}", 1) is None for i in range(200))


def test_same_faults_for_the_same_documents_in_any_order() -> None:
    docs = [f"Document number {i} with a few words of prose in it." for i in range(30)]

    def statuses(order: list[int]) -> dict[int, int]:
        with FakeLLMServer(p500=0.3, p400=0.2, seed=3) as s:
            return {i: http(s.base_url + "/chat/completions", chat_body(docs[i]))[0] for i in order}

    forward = statuses(list(range(30)))
    assert forward == statuses(list(reversed(range(30))))
    assert set(forward.values()) == {200, 400, 500}


def test_faults_over_http(server: FakeLLMServer) -> None:
    url = server.base_url + "/chat/completions"
    server.configure(p429=1.0, retry_after_ms=1500)
    status, body, headers = http(url, chat_body("A doc."))
    assert status == 429 and body["error"]["code"] == "rate_limit_exceeded"
    assert headers["retry-after-ms"] == "1500" and float(headers["retry-after"]) == 1.5
    server.configure(p429=0.0, p_empty=1.0)
    status, body, _ = http(url, chat_body("A doc."))
    assert status == 200 and body["choices"] == [] and body["usage"]["prompt_tokens"] > 0
    server.configure(p_empty=0.0, p_malformed=1.0)
    status, body, _ = http(url, chat_body("A doc with some words in it, enough for a section."))
    with pytest.raises(json.JSONDecodeError):
        json.loads(body["choices"][0]["message"]["content"])
    server.configure(p_malformed=0.0, p500=1.0)
    assert http(url, chat_body("A doc."))[0] == 500
    assert server.stats()["by_fault"] == {"429": 1, "empty": 1, "malformed": 1, "500": 1}


def test_hung_request_times_out_client_side_and_does_not_block_shutdown() -> None:
    server = FakeLLMServer(p_hang=1.0, hang_s=600).start()
    with pytest.raises(TimeoutError):
        urllib.request.urlopen(
            urllib.request.Request(server.base_url + "/chat/completions", data=json.dumps(chat_body("x")).encode()),
            timeout=0.2,
        )
    assert server.stats()["in_flight"] == 1
    server.stop()  # returns at once: the stop event ends the hang


def test_server_side_rpm_limit_and_ratelimit_headers() -> None:
    with FakeLLMServer(rpm_limit=3, retry_after_ms=10) as server:
        url = server.base_url + "/chat/completions"
        answers = [http(url, chat_body(f"Doc {i}.")) for i in range(4)]
        assert [a[0] for a in answers] == [200, 200, 200, 429]
        assert [a[2]["x-ratelimit-remaining-requests"] for a in answers[:3]] == ["2", "1", "0"]
        assert answers[0][2]["x-ratelimit-limit-requests"] == "3"
        assert re.fullmatch(r"\d+ms", answers[2][2]["x-ratelimit-reset-requests"])
        assert float(answers[3][2]["retry-after"]) > 50  # until the first request leaves the 60 s window
        assert server.stats()["by_fault"] == {"rate-limit": 1}


def test_server_side_tpm_limit_counts_each_admitted_request() -> None:
    """The window takes each request's prompt estimate (the limiter's own estimate of the same body), refuses the
    one that would go over, and counts nothing for it; the requests limit stays off."""
    from rise_batch.llm.tokens import counter_for

    bodies = [chat_body("Some words of a document. " * n) for n in (40, 40, 400)]
    sizes = [counter_for(b["model"]).request(b, exact=False) for b in bodies]
    limit = sizes[0] + sizes[1] + sizes[2] // 2
    with FakeLLMServer(tpm_limit=limit, retry_after_ms=10) as server:
        url = server.base_url + "/chat/completions"
        answers = [http(url, b) for b in bodies]
        assert [a[0] for a in answers] == [200, 200, 429]
        remaining = [int(a[2]["x-ratelimit-remaining-tokens"]) for a in answers[:2]]
        assert remaining == [limit - sizes[0], limit - sizes[0] - sizes[1]]
        assert "x-ratelimit-remaining-requests" not in answers[0][2]
        assert float(answers[2][2]["retry-after"]) > 50
        assert http(url, chat_body("Tiny."))[0] == 200  # fits in what is left: the refused one was not counted


def test_admin_endpoints() -> None:
    with FakeLLMServer(allow_config=True) as server:
        check_admin_endpoints(server)


def check_admin_endpoints(server: FakeLLMServer) -> None:
    base = server.base_url
    status, models, _ = http(base + "/models")
    assert status == 200 and "gpt-5.4-nano" in {m["id"] for m in models["data"]}
    status, cfg, _ = http(base + "/_config", {"p500": 1.0, "seed": 5})
    assert status == 200 and cfg["p500"] == 1.0 and server.state.config.seed == 5
    assert http(base + "/_config", {"p500": 2.0})[0] == 400
    assert http(base + "/_config", {"no_such_setting": 1})[0] == 400
    http(base + "/chat/completions", chat_body("First doc."))
    http(base + "/_config", {"p500": 0.0})
    http(base + "/chat/completions", chat_body("Second doc."))
    _, log, _ = http(base + "/_log")
    assert [(e["i"], e["status"], e["head"]) for e in log["entries"]] == [
        (0, 500, "First doc."),
        (1, 200, "Second doc."),
    ]
    assert [e["i"] for e in http(base + "/_log?since=1")[1]["entries"]] == [1]
    _, stats, _ = http(base + "/_stats")
    assert stats["requests"] == 2 and stats["by_status"] == {"200": 1, "500": 1} and stats["distinct_keys"] == 2
    assert http(base + "/_reset", {})[0] == 200 and server.stats()["requests"] == 0


def test_bad_requests_and_routing(server: FakeLLMServer) -> None:
    url = server.base_url + "/chat/completions"
    assert http(url, b"{not json")[0] == 400
    assert http(url, {"model": "m", "messages": []})[0] == 400
    assert http(url, {"messages": [{"role": "user", "content": "hi"}]})[0] == 400
    assert http(server.base_url + "/nowhere")[0] == 404
    assert http(url, method="GET")[0] == 405
    status, body, _ = http(url, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and "no scripted policy" in body["choices"][0]["message"]["content"]


def test_extension_points_routes_and_responders() -> None:
    class Judge:
        name = "judge"

        def matches(self, request: Any) -> bool:
            return request.model == "fake-judge"

        def respond(self, request: Any) -> dict[str, Any]:
            return {"role": "assistant", "content": "correct: yes"}

    def files(server: FakeLLMServer, request: Any, match: re.Match[str]) -> HttpResponse:
        return json_response(200, {"id": match["id"], "object": "file"})

    with FakeLLMServer() as server:
        server.responders.insert(0, Judge())
        server.add_route("GET", r"/v1/files/(?P<id>[\w-]+)", files, first=True)  # ahead of the Batch API route
        body = {"model": "fake-judge", "messages": [{"role": "user", "content": "grade this"}]}
        _, reply, _ = http(server.base_url + "/chat/completions", body)
        assert reply["choices"][0]["message"]["content"] == "correct: yes"
        assert http(server.base_url + "/files/file-abc")[1] == {"id": "file-abc", "object": "file"}
        assert server.log()[0]["responder"] == "judge"


def test_cli_serves_until_terminated() -> None:
    with cli_server("--p500", "1.0") as (proc, base):
        assert http(base + "/chat/completions", chat_body("A doc."))[0] == 500
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert '"requests": 1' in out and '"500": 1' in out


def test_cli_refuses_bad_settings() -> None:
    proc = cli_refusal("--p429", "1.5")
    assert proc.returncode == 2 and "probabilities" in proc.stderr
