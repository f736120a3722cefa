"""The async OpenAI-compatible client every LLM call of the project goes through.

The wire is a Transport (rise_batch.llm.transport: the openai SDK on httpx or aiohttp, the direct aiohttp path, the
Responses API over any of them), chosen by name from the config; this client owns what does not depend on it.
Transports do not retry (the SDK's `max_retries=0`): tenacity owns retries, so that one policy (rise_batch.llm.retry)
decides what is retried, every HTTP attempt takes a lease from the shared limiter (a retry costs rate like any
request), a 429 cools the whole limiter down, and attempts, retries and 429s are counted where a run can report them.

Failure contract: `chat()` either returns a Reply or raises `LLMError` — for a non-retryable error (400, 404,
context too long...) at once, for a retryable one after `max_attempts`. The structuring backend records the document
as outcome `error` with `str(exc)`, unless the failure is transient (retry.is_transient: it is then left for a
resume). A 401 or 403 raises `KeyRefused` instead: the key is wrong for every request, so the job stops; from then
on this client sends nothing and every call raises it at once (at most the requests already in flight meet it too).
A reply whose content is not the JSON the caller wanted is still a Reply: judging content is the caller's job (the
backend re-asks once, counted apart). A reply body that is not JSON at all is retried, but one that fails the same way
twice is not (it would again: a server bug, not a glitch), and what those unusable replies were billed goes with
the LLMError (`paid`, `unpriced`: the replies whose usage could not be read). Lone surrogate escapes (`"\ud800"`) in
a reply are valid JSON to the API's own clients: they are decoded and replaced by U+FFFD, never a reason to retry.

Structured outputs: a client built with a `response_format` (structuring's TOC schema, the judge's) sends it with
every `chat()` while `config.structured_output` is on, and marks those replies `constrained`. A server that refuses
it (a 400 saying response_format is not supported: llm/errors.refuses_response_format) gets the same request again
without it, and the client stops sending it for the rest of its life, with one warning and
`structured_output_disabled` in its stats: a provider without structured outputs costs a run the refused requests
(those already in flight at the first refusal, at most `concurrency` per worker, each sent again), not documents.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import orjson
from openai.types.chat import ChatCompletion
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from rise_batch.config import LLMConfig
from rise_batch.llm.errors import (  # LLMError: also importable from here
    BodyNotJSON,
    KeyRefused,
    LLMError,
    UnusableReplyError,
    refuses_response_format,
)
from rise_batch.llm.limiter import AsyncLimiter, Limiter
from rise_batch.llm.pricing import PriceTable
from rise_batch.llm.ratelimit import RateLimits
from rise_batch.llm.retry import Verdict, classify
from rise_batch.llm.spend import worst_case_usd
from rise_batch.llm.tokens import counter_for
from rise_batch.llm.transport import CHAT_PATH, EMBEDDINGS_PATH, Transport, make_transport
from rise_batch.money.journal import spend_what, writer_for
from rise_batch.money.replies import ReplyStore, request_sha256
from rise_batch.money.usage import Tokens, checked_usage, read_usage
from rise_batch.types import Reply

log = logging.getLogger(__name__)


@dataclass
class LLMStats:
    """Counters of one client (one worker); summed across workers into run stats."""

    calls: int = 0  # chat()/complete() calls
    attempts: int = 0  # HTTP requests sent
    retries: int = 0
    rate_limited: int = 0  # 429 replies
    server_errors: int = 0  # 5xx replies
    timeouts: int = 0
    connection_errors: int = 0
    bad_replies: int = 0  # 2xx replies that were unusable (no choices, invalid body)
    client_errors: int = 0  # other 4xx, and context overflows whatever their status (the request's own fault)
    failures: int = 0  # calls that ended in LLMError
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    structured_output_refused: int = 0  # requests a server refused for their response_format (sent again without)
    structured_output_disabled: int = 0  # 1 once this client stopped sending response_format (summed: workers)
    usage_estimated: int = 0  # replies billed at the engine's own count: their usage was missing or not believable
    replayed: int = 0  # calls answered from a kept reply (money/replies.py): no request, no spend

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def count_failure(self, verdict: Verdict) -> None:
        field = {
            "rate-limit": "rate_limited",
            "server": "server_errors",
            "timeout": "timeouts",
            "request-timeout": "timeouts",
            "connection": "connection_errors",
            "bad-response": "bad_replies",
            "client": "client_errors",
            "conflict": "client_errors",
            "context-overflow": "client_errors",
        }.get(verdict.kind)
        if field:
            setattr(self, field, getattr(self, field) + 1)


class Embeddings(NamedTuple):
    """One successful embeddings call: a vector per input (in input order) and what the call was billed."""

    vectors: list[list[float]]
    input_tokens: int
    cost_usd: float
    attempts: int


class Completion(NamedTuple):
    """One successful call: the API object (for tool calls and the like), its priced Reply, and how it went."""

    completion: ChatCompletion
    reply: Reply
    attempts: int
    headers: dict[str, str]


# the output side of a reservation when the request sets no reply cap (no --max-output-tokens): a worst case is
# needed for a call a kill leaves unsettled, and no reply of the models priced here is longer
UNCAPPED_WORST_OUTPUT = 128_000


def reply_output_tokens(model: str, message: dict[str, Any]) -> int:
    """The engine's own count of what a reply shows: its text and its tool calls' JSON."""
    text = message.get("content") or ""
    calls = message.get("tool_calls")
    if calls:
        text = (text if isinstance(text, str) else json.dumps(text)) + json.dumps(calls)
    return counter_for(model).count(text if isinstance(text, str) else json.dumps(text))


class LLMClient:
    """`await client.chat(messages) -> Reply`, rate limited, retried and priced. Use as an async context manager."""

    def __init__(
        self,
        config: LLMConfig,
        *,
        limiter: Limiter | None = None,
        prices: PriceTable | None = None,
        batch_pricing: bool = False,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
        max_retry_after_s: float = 120.0,
        cooldown_s: float = 1.0,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        http_backend: str | None = None,
        api: str = "chat",
        response_format: dict[str, Any] | None = None,
        budget: Any = None,
        out: Any = None,
    ) -> None:
        """`http_backend` overrides `config.http_backend`; `api`: "chat" or "responses" (transport.APIS);
        `response_format`: what chat() sends while `config.structured_output` is on (see the module docstring);
        `budget`: a dollar limit (llm.spend.CostBudget, or a Ray job's RemoteBudget) every HTTP attempt reserves its
        worst case from before it is sent (`admit`), and settles with what it cost (BudgetExceeded when it would
        not fit); `out`: the output directory whose spend journal every HTTP attempt is written in before it is
        sent (money/journal.py), and whose kept replies answer a request sent again (money/replies.py)."""
        self.config = config
        self.response_format = response_format if config.structured_output else None
        self.limiter: Limiter = limiter or AsyncLimiter(
            RateLimits(rpm=config.rpm, tpm=config.tpm, window_s=config.limit_window_s), config.concurrency
        )
        self.prices = prices or PriceTable.load([config.prices_file] if config.prices_file else [])
        self.batch_pricing = batch_pricing
        self.backoff_initial_s, self.backoff_max_s = backoff_initial_s, backoff_max_s
        self.max_retry_after_s, self.cooldown_s = max_retry_after_s, cooldown_s
        self._sleep = sleep
        self.stats = LLMStats()
        self.budget = budget
        self.journal = writer_for(out) if out is not None else None
        self.replies = ReplyStore(out) if out is not None else None
        self.refused: str | None = None  # why the endpoint refused the key, once it has
        self.transport: Transport = make_transport(config, http_backend=http_backend, api=api)

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.transport.aclose()
        if self.journal is not None:
            self.journal.flush()  # object storage: the settlements waiting for the next reservation's PUT

    async def chat(self, messages: list[dict[str, Any]]) -> Reply:
        """The structuring transport: messages in, text and priced usage out (raises LLMError)."""
        fmt = self.response_format
        if fmt is None:
            return (await self._complete(messages, None, {}, typed=False)).reply
        try:
            reply = (await self._complete(messages, None, {"response_format": fmt}, typed=False)).reply
        except LLMError as e:
            if not refuses_response_format(e.status, str(e)):
                raise
            self._format_refused(e)
            return (await self._complete(messages, None, {}, typed=False)).reply
        return reply._replace(constrained=True)

    def forget(self, messages: list[dict[str, Any]]) -> None:
        """Drop the kept reply `chat(messages)` would be answered from (money/replies.py): the caller could not use
        it, and the next call should buy a fresh one."""
        if self.replies is not None:
            fmt = {"response_format": self.response_format} if self.response_format is not None else {}
            self.replies.forget(request_sha256(chat_request(self.config, messages, **fmt)))

    def _format_refused(self, exc: LLMError) -> None:
        """The server does not take response_format: the call goes on without it (so it is neither a failed call
        nor a second call), and no later request of this client sends it."""
        self.stats.structured_output_refused += 1
        self.stats.calls -= 1
        self.stats.failures -= 1
        if self.response_format is not None:
            self.response_format = None
            self.stats.structured_output_disabled = 1
            log.warning(
                "rise-batch: the server refused structured outputs (%s); sending requests without response_format "
                "for the rest of this run (pass --no-structured-output to skip the refused request)",
                str(exc)[:300],
            )

    async def complete(
        self, messages: list[dict[str, Any]], *, timeout: float | None = None, **params: Any
    ) -> Completion:
        """Like chat() but with the full API object and extra request parameters (tools, ...) for agents."""
        return await self._complete(messages, timeout, params, typed=True)

    async def _complete(
        self, messages: list[dict[str, Any]], timeout: float | None, params: dict[str, Any], typed: bool
    ) -> Completion:
        """`typed`: build the SDK's ChatCompletion (~1 ms of CPU per reply; chat() needs only the text)."""
        if self.refused is not None:
            raise KeyRefused(self.refused)
        self.stats.calls += 1
        request = chat_request(self.config, messages, **params)
        sha = request_sha256(request) if self.replies is not None else ""
        if self.replies is not None and (kept := self.replies.get(sha)) is not None:
            return self._replayed(kept, typed)
        # the model's own tokenizer, long texts sampled (trued up from the reply's usage), exactly when a dollar
        # limit reserves from it (the worst case must not be an undercount); the reply's usage is checked against it
        est = counter_for(self.config.model).request(request, exact=self.budget is not None)
        max_out = int(request.get("max_completion_tokens") or 0)
        worst = worst_case_usd(
            self.prices, self.config.model, est, max_out or UNCAPPED_WORST_OUTPUT, batch=self.batch_pricing
        )
        engine_input = est
        est += max_out
        paid = [0, 0, 0, 0]  # tokens of every 2xx attempt, including unusable ones (they were billed); unpriced ones
        completion, headers, attempts, billed_for = await self._send(
            request, (est, engine_input), timeout, paid, worst, CHAT_PATH, sha=sha
        )
        if self.replies is not None:  # kept before it is used: a resume that sends this request again gets it
            self.replies.put(sha, completion | {"usage": billed_for.as_usage()})
        message = completion["choices"][0].get("message") or {}
        reply = self._priced(paid, completion.get("model") or self.config.model)
        reply = reply._replace(text=message.get("content") or "")
        typed_completion = ChatCompletion.construct(**completion) if typed else None
        return Completion(typed_completion, reply, attempts, headers)  # type: ignore[arg-type]

    async def embed(self, inputs: list[str], *, dimensions: int | None = None) -> Embeddings:
        """`POST /embeddings` (OpenAI's format, which vLLM, TEI and llama.cpp serve): one vector per input, in order,
        with the same limiter lease, retries, cost cap and pricing per attempt as a chat call (raises LLMError)."""
        if self.refused is not None:
            raise KeyRefused(self.refused)
        self.stats.calls += 1
        request: dict[str, Any] = {"model": self.config.model, "input": inputs, "encoding_format": "float"}
        if dimensions:
            request["dimensions"] = dimensions
        counter = counter_for(self.config.model)
        est = sum(counter.count(t) if self.budget is not None else counter.estimate(t) for t in inputs)
        worst = worst_case_usd(self.prices, self.config.model, est, 0)  # reserved in the budget and the journal
        paid = [0, 0, 0, 0]
        body, _, attempts, _ = await self._send(request, (est, est), None, paid, worst, EMBEDDINGS_PATH, len(inputs))
        rows = sorted(body["data"], key=lambda d: int(d.get("index", 0)))
        reply = self._priced(paid, body.get("model") or self.config.model)
        return Embeddings([row["embedding"] for row in rows], reply.input_tokens, reply.cost_usd, attempts)

    async def _send(
        self,
        request: dict[str, Any],
        counts: tuple[int, int],
        timeout: float | None,
        paid: list[int],
        worst: float,
        path: str,
        n_inputs: int = 0,
        sha: str = "",
    ) -> tuple[dict[str, Any], dict[str, str], int, Tokens]:
        """One call: attempts through `_attempt` under the retry policy -> (reply body, headers, attempts, the tokens
        its reply was billed for); a failure raised as KeyRefused or LLMError (what it was billed with it)."""
        attempts = 0
        bad: list[str] = []  # this call's bodies that were not JSON: the same one twice is not retried again

        def retryable(exc: BaseException) -> bool:
            verdict = self._classify(exc)
            if isinstance(exc, BodyNotJSON):
                if str(exc) in bad:
                    return False
                bad.append(str(exc))
            return verdict.retryable

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.config.max_attempts),
            wait=self._wait,
            retry=retry_if_exception(retryable),
            before_sleep=self._count_retry,
            sleep=self._sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    body, headers, billed_for = await self._attempt(
                        request, counts, timeout, paid, worst, sha, path, n_inputs
                    )
        except Exception as exc:
            self.stats.failures += 1
            verdict = self._classify(exc)
            if verdict.status in (401, 403):
                self.refused = self.refused or key_refused(self.config, verdict.status, str(exc))
                raise KeyRefused(self.refused) from None  # the chain would carry the request's headers
            where = f"HTTP {verdict.status} " if verdict.status else ""
            billed = self._priced(paid, self.config.model)
            raise LLMError(
                f"{where}{verdict.kind} after {attempts} attempt(s): {exc}",
                kind=verdict.kind,
                status=verdict.status,
                attempts=attempts,
                paid=billed if any(paid[:3]) else None,
                unpriced=paid[3],
            ) from exc
        return body, headers, attempts, billed_for

    async def _attempt(
        self,
        request: dict[str, Any],
        counts: tuple[int, int],
        timeout: float | None,
        paid: list[int],
        worst: float,
        sha: str = "",
        path: str = CHAT_PATH,
        n_inputs: int = 0,
    ) -> tuple[dict[str, Any], dict[str, str], Tokens]:
        """One HTTP request (every request of the client, chat or embeddings, goes through here). `counts`: (tokens
        the limiter reserves, the engine's count of the prompt). Written in the spend journal at its worst case
        before it is sent, settled with what it was billed after; `n_inputs`: the embeddings the reply must hold (0:
        a chat reply, which must hold a choice)."""
        est, engine_input = counts
        if self.budget is not None:  # BudgetExceeded (a BaseException): never retried, never an LLMError
            await self.budget.admit(worst)
        rid = self.journal.reserve(sha, worst, spend_what.get()) if self.journal is not None else None
        billed = 0.0  # a request the limiter never let out was not sent
        tokens: Tokens | None = None
        estimated = False
        try:
            lease = await self.limiter.acquire(est)
        except BaseException:
            self._settle(rid, worst, billed, tokens, estimated)
            raise
        self.stats.attempts += 1
        headers: dict[str, str] | None = None
        billed = worst  # a reply that never came (a timeout, a cancel) may have been billed: kept at its worst case
        replied = False
        try:
            content, headers = await self.transport.post(path, request, timeout)
            replied = True  # a 2xx body came back: it was billed, whatever it holds
            try:
                completion = parse_body(content)
            except UnusableReplyError:  # a 2xx is billed: what its body says of usage, checked against its size
                tokens, estimated = checked_usage(
                    usage_in_text(content), engine_input, -(-len(content) // 4), floor=self.budget is not None
                )
                billed = self._pay(tokens, estimated, paid, self.config.model)
                raise
            if path == EMBEDDINGS_PATH:  # input tokens only: an embeddings usage states no completion tokens
                usage = completion.get("usage")
                usage = {"completion_tokens": 0, **usage} if isinstance(usage, dict) else usage
                tokens, estimated = checked_usage(usage, engine_input, 0, floor=self.budget is not None)
                billed = self._pay(tokens, estimated, paid, completion.get("model") or self.config.model)
                check_reply(completion, n_inputs)
                return completion, headers, tokens
            choices = completion.get("choices")
            first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
            message = (first or {}).get("message")
            out = reply_output_tokens(self.config.model, message if isinstance(message, dict) else {})
            tokens, estimated = checked_usage(completion.get("usage"), engine_input, out, floor=self.budget is not None)
            billed = self._pay(tokens, estimated, paid, completion.get("model") or self.config.model)
            if first is None:
                raise UnusableReplyError("the reply has no choices")
            return completion, headers, tokens
        except Exception as exc:
            verdict = self._classify(exc)
            if not replied and verdict.kind not in ("timeout", "request-timeout"):
                billed = 0.0  # refused, a connection error, an error status: nothing generated, nothing billed
            self.stats.count_failure(verdict)
            if headers is None:
                headers = getattr(exc, "headers", None)  # a StatusError's: the limiter reads the server's state
            if verdict.kind == "rate-limit":
                await self.limiter.penalize(verdict.retry_after if verdict.retry_after is not None else self.cooldown_s)
            raise
        finally:
            self._settle(rid, worst, billed, tokens, estimated)
            await self.limiter.release(lease, tokens.input + tokens.output if tokens else None, headers)

    def _settle(self, rid: str | None, worst: float, billed: float, tokens: Tokens | None, estimated: bool) -> None:
        """An attempt is over: its journal entry and its reservation in the budget become what it was billed."""
        if self.journal is not None and rid is not None:
            self.journal.settle(rid, billed, tokens.as_usage() if tokens else None, estimated)
        if self.budget is not None:
            self.budget.settle(worst, billed)

    def _pay(self, tokens: Tokens, estimated: bool, paid: list[int], model: str) -> float:
        """Count a 2xx reply's checked usage into this call's `paid` and the client's stats; what it was billed."""
        paid[0] += tokens.input
        paid[1] += tokens.cached
        paid[2] += tokens.output
        self.stats.input_tokens += tokens.input
        self.stats.cached_input_tokens += tokens.cached
        self.stats.output_tokens += tokens.output
        self.stats.usage_estimated += estimated
        return self.prices.cost(model, *tokens, batch=self.batch_pricing, requested=self.config.model)

    def _replayed(self, completion: dict[str, Any], typed: bool) -> Completion:
        """A call answered from its kept reply: no request, no spend (the journal has it once, from the run that
        bought it). Its Reply says what the reply was billed then: a trajectory records what it cost to answer."""
        self.stats.replayed += 1
        tokens = read_usage(completion.get("usage")) or Tokens(0, 0, 0)
        model = completion.get("model") or self.config.model
        cost = self.prices.cost(model, *tokens, batch=self.batch_pricing, requested=self.config.model)
        message = completion["choices"][0].get("message") or {}
        reply = Reply(message.get("content") or "", *tokens, cost, model, replayed=True)
        typed_completion = ChatCompletion.construct(**completion) if typed else None
        return Completion(typed_completion, reply, 0, {})  # type: ignore[arg-type]

    def _priced(self, paid: list[int], model: str) -> Reply:
        """What this call's replies were billed, as a Reply (no text), its cost counted in the stats."""
        cost = self.prices.cost(model, paid[0], paid[1], paid[2], batch=self.batch_pricing, requested=self.config.model)
        self.stats.cost_usd += cost
        return Reply("", paid[0], paid[1], paid[2], cost, model)

    def _classify(self, exc: BaseException) -> Verdict:
        return classify(exc)  # transports raise rise_batch.llm.errors types, which the defaults cover

    def _wait(self, state: RetryCallState) -> float:
        """The server's retry-after when given (plus up to 10% jitter), else exponential backoff, half jittered."""
        exc = state.outcome.exception() if state.outcome else None
        retry_after = self._classify(exc).retry_after if exc else None
        if retry_after is not None and retry_after <= self.max_retry_after_s:
            return retry_after * (1.0 + 0.1 * random.random())
        base = min(self.backoff_max_s, self.backoff_initial_s * 2 ** (state.attempt_number - 1))
        return base / 2 + random.random() * base / 2

    def _count_retry(self, state: RetryCallState) -> None:
        self.stats.retries += 1


def check_reply(body: dict[str, Any], n_inputs: int) -> None:
    """An embeddings reply must hold one list of numbers per input, all of one length (else it is unusable)."""
    data = body.get("data")
    if not isinstance(data, list) or len(data) != n_inputs:
        got = len(data) if isinstance(data, list) else "no"
        raise UnusableReplyError(f"the embeddings reply holds {got} vectors for {n_inputs} inputs")
    sizes = {len(d["embedding"]) if isinstance(d, dict) and isinstance(d.get("embedding"), list) else -1 for d in data}
    if len(sizes) != 1 or -1 in sizes or 0 in sizes:
        raise UnusableReplyError("the embeddings reply's vectors are not lists of numbers of one length")


def key_refused(config: LLMConfig, status: int, detail: str) -> str:
    """The one line a refused key ends a job with: which endpoint, which variable, and what to do. Never the key."""
    import os

    url = config.base_url or "https://api.openai.com/v1"
    key = os.environ.get(config.api_key_env)
    if key:
        detail = detail.replace(key, "***")
        held = f"the key in ${config.api_key_env}"
    else:
        held = f"the request: ${config.api_key_env} is not set where the request was sent"
    return (
        f"the endpoint {url} refused {held} (HTTP {status}: {detail[:200]}); set a valid key in "
        f"${config.api_key_env} (or name another variable with --api-key-env) and re-run the same command: finished "
        "work is kept, and what the refusal stopped is done then"
    )


def chat_request(config: LLMConfig, messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    """The body of a chat completion request: sent online, or written as one line of a Batch API file."""
    request: dict[str, Any] = {"model": config.model, "messages": messages, **params}
    if config.reasoning_effort is not None:
        request.setdefault("reasoning_effort", config.reasoning_effort)
    if config.max_output_tokens:
        request.setdefault("max_completion_tokens", config.max_output_tokens)
    return request


def parse_body(body: bytes) -> dict[str, Any]:
    """The reply as a plain dict (orjson); a provider's extra or missing fields pass, non-JSON is retryable. orjson
    refuses a lone surrogate escape (`"\ud800"`), which the stdlib and the API's own clients decode: such a body is
    read by the stdlib, its lone surrogates replaced by U+FFFD (what UTF-8 can carry on)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        try:
            data = without_surrogates(json.loads(body))
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            raise BodyNotJSON(f"the response body is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise BodyNotJSON(f"the response body is not a JSON object: {body[:80]!r}")
    return data


_SURROGATE = re.compile("[\ud800-\udfff]")  # json.loads pairs valid pairs: what is left is lone
_USAGE_FIELD = re.compile(rb'"(prompt_tokens|completion_tokens|cached_tokens)"\s*:\s*(\d+)')


def without_surrogates(value: Any) -> Any:
    """`value` with every string's lone surrogates replaced by U+FFFD (keys too)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [without_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {without_surrogates(k): without_surrogates(v) for k, v in value.items()}
    return value


def usage_in_text(body: bytes) -> dict[str, Any] | None:
    """The usage a body that is not JSON still states (a reply cut or broken after its usage): the first count of
    each field, as the API's `usage` object; None when it says none."""
    found: dict[str, int] = {}
    for name, number in _USAGE_FIELD.findall(body[-100_000:]):
        found.setdefault(name.decode(), int(number))
    if "prompt_tokens" not in found and "completion_tokens" not in found:
        return None
    cached = {"prompt_tokens_details": {"cached_tokens": found["cached_tokens"]}} if "cached_tokens" in found else {}
    return {k: v for k, v in found.items() if k != "cached_tokens"} | cached


def format_params(config: LLMConfig, response_format: dict[str, Any] | None) -> dict[str, Any]:
    """`chat_request` parameters carrying `response_format` when structured outputs are on (Batch API lines)."""
    return {"response_format": response_format} if config.structured_output and response_format else {}


def client_from_config(config: LLMConfig, *, limiter: Limiter | None = None, **options: Any) -> LLMClient:
    """The client a worker builds from the job's `llm:` config (limiter: the job's shared one, when distributed)."""
    return LLMClient(config, limiter=limiter, **options)
