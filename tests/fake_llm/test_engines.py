"""The fake server's two HTTP engines (asyncio, the default, and threads) seen from outside: the same answers, faults,
request log and limits through the real openai client and raw sockets, and the edges a real client can hit
(a malformed request, a client leaving mid-latency, 200 keep-alive connections at once, a body over the limit)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from typing import Any

import openai
import pytest

from rise_batch.fake_llm import FakeLLMServer
from tests.fake_llm.helpers import cli_refusal, cli_server
from tests.fake_llm.test_server import chat_body, http

ENGINES = ["asyncio", "threads"]
FAULTS = {"seed": 7, "p429": 0.15, "p500": 0.15, "p_malformed": 0.15, "p_empty": 0.1, "retry_after_ms": 5.0}
VOLATILE = {"created", "created_at", "completed_at", "finalizing_at", "in_progress_at", "t", "elapsed_s", "expires_at"}


def _stable(obj: Any) -> Any:
    """`obj` without clock readings, which differ between any two runs."""
    if isinstance(obj, dict):
        return {k: _stable(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list | tuple):
        return [_stable(v) for v in obj]
    return obj


def _raw(port: int, data: bytes, *, read: bool = True) -> bytes:
    """Send `data` on a fresh connection; everything the server sends back until it closes (or 10 s pass)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        if not read:
            return b""
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def _session(server: FakeLLMServer) -> dict[str, Any]:
    """A fixed session through the real openai client (no retries, so every fault is seen) plus the Batch API;
    what a client and the server's own log and counts record of it, clocks left out."""
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-fake", max_retries=0)
    seen: list[Any] = []
    for i in range(30):
        try:
            reply = client.chat.completions.create(**chat_body(f"Document {i}. " + "Some words here. " * (i + 1)))
            seen.append(("ok", reply.model_dump()))
        except openai.APIStatusError as e:
            headers = {k: e.response.headers.get(k) for k in ("retry-after", "retry-after-ms", "x-simulated-cost")}
            seen.append((e.status_code, e.body, headers))
    responses = client.responses.create(model="gpt-5.4-mini", input="Say hello.", reasoning={"effort": "low"})
    seen.append(responses.model_dump())
    lines = [
        {"custom_id": f"d{i}", "method": "POST", "url": "/v1/chat/completions", "body": chat_body(f"Batch doc {i}.")}
        for i in range(5)
    ]
    upload = client.files.create(
        file=("in.jsonl", "".join(json.dumps(x) + "\n" for x in lines).encode()), purpose="batch"
    )
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
    for _ in range(20):
        batch = client.batches.retrieve(batch.id)
        if batch.status == "completed":
            break
    seen.append(batch.model_dump())
    seen.append([json.loads(x) for x in client.files.content(batch.output_file_id).text.splitlines()])
    seen.append(http(server.base_url + "/_config", {"p500": 1.0})[:2])  # 403: not started with allow_config
    seen.append(http(server.base_url + "/nowhere")[:2])
    seen.append(http(server.base_url + "/models", method="DELETE")[:2])
    return {"client": _stable(seen), "log": _stable(server.log()), "stats": server.stats()}


def test_both_engines_answer_a_session_identically() -> None:
    runs = {}
    for engine in ENGINES:
        with FakeLLMServer(engine=engine, latency_ms=2, **FAULTS) as server:
            runs[engine] = _session(server)
    faults = runs["asyncio"]["stats"]["by_fault"]
    assert {"429", "500", "malformed", "empty"} <= set(faults), faults  # the session met every fault it sets
    assert runs["asyncio"]["stats"]["by_path"]["/v1/responses"] == 1
    assert runs["asyncio"] == runs["threads"]


@pytest.mark.parametrize("engine", ENGINES)
def test_malformed_requests_get_an_error_and_the_server_keeps_serving(engine: str) -> None:
    with FakeLLMServer(engine=engine) as server:
        for junk in (b"GET /v1/models HTTP/1.1 extra\r\n\r\n", b"\x16\x03\x01 \x00\x01 \xfc\x03\r\n\r\n"):
            reply = _raw(server.port, junk)  # the server answers and closes the connection (recv returns b"")
            # http.server answers a bad request line HTTP/0.9-style: its error page with no status line
            assert reply.split()[1] == b"400" or b"Error code: 400" in reply, (junk, reply[:200])
        reply = _raw(server.port, b"GET /v1/models HTTP/1.1\r\n: no name\r\nConnection: close\r\n\r\n")
        assert reply.split()[1] in (b"200", b"400")  # http.server lets a nameless header through; asyncio refuses it
        reply = _raw(server.port, b"PUT /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        assert reply.split()[1] == b"501"
        reply = _raw(server.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert reply.split()[1] == b"200" and b'"fake-llm"' in reply
        assert http(server.base_url + "/chat/completions", chat_body("Still fine."))[0] == 200


@pytest.mark.parametrize("engine", ENGINES)
def test_a_client_leaving_mid_latency_is_answered_into_the_void_and_logged(engine: str) -> None:
    with FakeLLMServer(engine=engine, latency_ms=400) as server:
        body = json.dumps(chat_body("Left before the answer.")).encode()
        head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        _raw(server.port, head + body, read=False)  # sends, then closes at once
        status, reply, _ = http(server.base_url + "/chat/completions", chat_body("Stayed."))
        assert status == 200 and reply["choices"]
        deadline = time.monotonic() + 10
        while server.stats()["requests"] < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        stats = server.stats()
        assert stats["requests"] == 2 and stats["by_status"] == {"200": 2} and stats["in_flight"] == 0
        assert sorted(e["head"] for e in server.log()) == ["Left before the answer.", "Stayed."]


async def _keep_alive_client(port: int, n_requests: int) -> list[int]:
    """One connection, `n_requests` chat completions one after another on it; their statuses."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    statuses = []
    try:
        for i in range(n_requests):
            body = json.dumps(chat_body(f"Connection {port} request {i}.")).encode()
            writer.write(
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            )
            writer.write(body)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
            json.loads(await reader.readexactly(length))
            statuses.append(int(head.split()[1]))
    finally:
        writer.close()
    return statuses


@pytest.mark.parametrize("engine", ENGINES)
def test_200_concurrent_keep_alive_connections_are_all_served_at_once(engine: str) -> None:
    # a latency far above the time 200 small requests take to send, even on a busy machine: all wait together
    with FakeLLMServer(engine=engine, latency_ms=3000) as server:

        async def crowd() -> list[list[int]]:
            return await asyncio.gather(*(_keep_alive_client(server.port, 2) for _ in range(200)))

        results = asyncio.run(crowd())
        assert all(r == [200, 200] for r in results)
        stats = server.stats()
        assert stats["requests"] == 400 and stats["max_in_flight"] == 200


def test_asyncio_waits_are_timers_not_threads() -> None:
    before = threading.active_count()
    with FakeLLMServer(engine="asyncio", latency_ms=2000) as server:
        threads: list[int] = []
        done = threading.Event()

        def watch() -> None:
            while not done.wait(0.02):
                threads.append(threading.active_count())

        async def crowd() -> list[list[int]]:
            return await asyncio.gather(*(_keep_alive_client(server.port, 1) for _ in range(50)))

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            assert all(r == [200] for r in asyncio.run(crowd()))
        finally:
            done.set()
            watcher.join()
        assert server.stats()["max_in_flight"] == 50
        assert max(threads) <= before + 2  # the loop's thread and the watcher: no thread per waiting request


@pytest.mark.parametrize("engine", ENGINES)
def test_a_body_over_the_limit_is_refused_before_it_is_read(engine: str) -> None:
    with FakeLLMServer(engine=engine, max_body_bytes=1000) as server:
        # announced but never sent: the answer comes at once and the connection is closed (recv ends)
        reply = _raw(server.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n")
        assert reply.split()[1] == b"413" and b"Connection: close" in reply and b"1000" in reply
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-fake", max_retries=0)
        with pytest.raises(openai.APIStatusError) as e:
            client.chat.completions.create(**chat_body("x " * 2000))
        assert e.value.status_code == 413
        assert client.chat.completions.create(**chat_body("Small.")).choices
        assert server.stats()["requests"] == 1


@pytest.mark.parametrize("engine", ENGINES)
def test_stop_ends_a_hang_with_a_503(engine: str) -> None:
    server = FakeLLMServer(engine=engine, p_hang=1.0, hang_s=600).start()
    answers: list[int] = []

    def ask() -> None:
        answers.append(http(server.base_url + "/chat/completions", chat_body("Hangs."))[0])

    asker = threading.Thread(target=ask)
    asker.start()
    while server.stats()["in_flight"] < 1:
        time.sleep(0.01)
    server.stop()
    asker.join(timeout=20)
    assert answers == [503] and server.stats()["in_flight"] == 0


def test_cli_engine_flag() -> None:
    for engine in ENGINES:
        with cli_server("--engine", engine) as (_, base):
            assert http(base + "/chat/completions", chat_body("Via the CLI."))[0] == 200
    refused = cli_refusal("--engine", "fibers")
    assert refused.returncode == 2 and "--engine" in refused.stderr
    with pytest.raises(ValueError, match="engine"):
        FakeLLMServer(engine="fibers")


@pytest.mark.parametrize("engine", ENGINES)
def test_the_first_request_does_not_pay_for_loading_the_tokenizer(engine: str) -> None:
    """Loading o200k_base costs ~0.6 s of CPU. A started server has it loaded, so its first answer costs what any
    answer costs (milliseconds): measured as the server process's CPU time, which a busy machine barely moves."""
    import psutil

    with cli_server("--engine", engine) as (proc, base):
        server = psutil.Process(proc.pid)
        before = sum(server.cpu_times()[:2])
        assert http(base + "/chat/completions", chat_body("The first request of all."))[0] == 200
        first = sum(server.cpu_times()[:2]) - before
        assert first < 0.2, f"the first request cost {first:.2f} s of server CPU"


@pytest.mark.parametrize("engine", ENGINES)
def test_an_agents_scripted_hang_holds_only_its_own_request(engine: str) -> None:
    """`[fake:hang=S]` in an agent's question is a wait the engine schedules, not a sleep inside the responder: on the
    asyncio engine a sleeping responder held the event loop, so every other trajectory's model call waited too."""
    from rise_batch.fake_llm.agent import AgentResponder
    from rise_batch.fake_llm.chat import FallbackResponder

    tools = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {}}}}]

    def agent_body(question: str) -> dict[str, Any]:
        return {"model": "gpt-5.4-mini", "messages": [{"role": "user", "content": question}], "tools": tools}

    server = FakeLLMServer(engine=engine, responders=[AgentResponder(), FallbackResponder()]).start()
    try:
        hung: list[int] = []
        asker = threading.Thread(
            target=lambda: hung.append(http(server.base_url + "/chat/completions", agent_body("q [fake:hang=30]"))[0])
        )
        asker.start()
        while server.stats()["in_flight"] < 1:
            time.sleep(0.01)
        status, _, _ = http(server.base_url + "/chat/completions", agent_body("Another trajectory's question."))
        assert status == 200 and asker.is_alive() and not hung, "the second request waited for the hang"
    finally:
        server.stop()
        asker.join(timeout=20)
    assert hung == [503], "stopping the server ends the hang"
