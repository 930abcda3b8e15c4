"""The fake provider (tests/provider_server.py) against the real official SDK clients.

Every call goes through `anthropic`, `openai` or `google-genai` exactly as an adapter would
make it, with the SDK's own retries off, so what is checked here is what those SDKs make of
the server's answers: objects, usage numbers, exception classes and headers.
"""
from __future__ import annotations

import functools
import json
import threading
import time
from dataclasses import dataclass

import httpx2
import pytest
from helpers import Later
from provider_server import Answer, Fault, ProviderServer

anthropic, openai, genai = Later("anthropic"), Later("openai"), Later("google.genai")
genai_errors, types = Later("google.genai.errors"), Later("google.genai.types")

APIS = ("anthropic", "openai-responses", "openai-chat", "gemini")
CONVERSATION = [("user", "Hello there"), ("assistant", "Hi!"), ("user", "What is 2+2?")]


@dataclass
class Got:
    """An SDK's answer, read the way an adapter would read it."""
    text: str
    thinking: str | None
    prompt: int
    cached: int
    output: int
    reasoning: int


@pytest.fixture(scope="module")
def shared_server():
    with ProviderServer() as srv:
        yield srv


@pytest.fixture
def server(shared_server):
    shared_server.reset()
    yield shared_server
    assert shared_server.errors == []  # nothing went wrong inside the server itself


@functools.cache  # making a client costs ~30 ms (its SSL context); reuse them
def client(sdk, server, timeout, key):  # keyed by server: a reused port must not reuse a client
    url = server.url
    if sdk == "anthropic":
        return anthropic.Anthropic(api_key=key, base_url=url, max_retries=0, timeout=timeout)
    if sdk == "openai":
        return openai.OpenAI(api_key=key, base_url=url + "/v1", max_retries=0, timeout=timeout)
    # google-genai never retries unless HttpOptions.retry_options is set; its timeout is in ms.
    return genai.Client(api_key=key, http_options=types.HttpOptions(base_url=url, timeout=int(timeout * 1000)))


def _anthropic(server, stream, timeout, key, model):
    client_ = client("anthropic", server, timeout, key)
    kwargs = dict(model=model or "claude-test", max_tokens=1024, system="Be brief.",
                  messages=[{"role": r, "content": t} for r, t in CONVERSATION])
    if stream:
        with client_.messages.stream(**kwargs) as s:
            m = s.get_final_message()
    else:
        m = client_.messages.create(**kwargs)
    u = m.usage
    reasoning = u.output_tokens_details.thinking_tokens if u.output_tokens_details else 0
    thinking = "".join(b.thinking for b in m.content if b.type == "thinking") or None
    return Got("".join(b.text for b in m.content if b.type == "text"), thinking,
               u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens,
               u.cache_read_input_tokens, u.output_tokens - reasoning, reasoning)


def _responses(server, stream, timeout, key, model):
    client_ = client("openai", server, timeout, key)
    kwargs = dict(model=model or "gpt-test", instructions="Be brief.",
                  input=[{"role": r, "content": t} for r, t in CONVERSATION])
    if stream:
        with client_.responses.stream(**kwargs) as s:
            r = s.get_final_response()
    else:
        r = client_.responses.create(**kwargs)
    summary = "".join(p.text for item in r.output if item.type == "reasoning" for p in item.summary)
    u = r.usage
    reasoning = u.output_tokens_details.reasoning_tokens
    return Got(r.output_text, summary or None, u.input_tokens, u.input_tokens_details.cached_tokens,
               u.output_tokens - reasoning, reasoning)


def _chat(server, stream, timeout, key, model):
    client_ = client("openai", server, timeout, key)
    kwargs = dict(model=model or "gpt-test", messages=[{"role": "system", "content": "Be brief."}] +
                  [{"role": r, "content": t} for r, t in CONVERSATION])
    if stream:
        chunks = list(client_.chat.completions.create(**kwargs, stream=True,
                                                      stream_options={"include_usage": True}))  # else no usage
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        text = "".join(d.content or "" for d in deltas)
        thinking = "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas) or None
        u = chunks[-1].usage
    else:
        c = client_.chat.completions.create(**kwargs)
        message, u = c.choices[0].message, c.usage
        text, thinking = message.content, (message.model_extra or {}).get("reasoning_content")
    reasoning = u.completion_tokens_details.reasoning_tokens
    return Got(text, thinking, u.prompt_tokens, u.prompt_tokens_details.cached_tokens,
               u.completion_tokens - reasoning, reasoning)


def _gemini(server, stream, timeout, key, model):
    client_ = client("gemini", server, timeout, key)
    kwargs = dict(model=model or "gemini-test", config=types.GenerateContentConfig(system_instruction="Be brief."),
                  contents=[{"role": "model" if r == "assistant" else "user", "parts": [{"text": t}]}
                            for r, t in CONVERSATION])
    chunks = list(client_.models.generate_content_stream(**kwargs)) if stream \
        else [client_.models.generate_content(**kwargs)]
    parts = [p for c in chunks for p in (c.candidates[0].content.parts or [])]
    u = chunks[-1].usage_metadata
    thinking = "".join(p.text for p in parts if p.thought) or None
    return Got("".join(p.text for p in parts if not p.thought), thinking, u.prompt_token_count,
               u.cached_content_token_count or 0, u.candidates_token_count, u.thoughts_token_count or 0)


CALLS = {"anthropic": _anthropic, "openai-responses": _responses, "openai-chat": _chat, "gemini": _gemini}


def call(api, server, *, stream=False, timeout=5.0, key="k", model=None) -> Got:
    return CALLS[api](server, stream, timeout, key, model)


def failure(api, server, **kwargs) -> Exception:
    with pytest.raises(Exception) as info:
        call(api, server, **kwargs)
    return info.value


def status_of(err) -> int:
    return err.code if isinstance(err, genai_errors.APIError) else err.status_code


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", APIS)
def test_answer_thinking_and_usage(server, api, stream):
    server.responder = lambda req: Answer("Four, as it happens.", thinking="2+2 is 4.", input_tokens=1000,
                                          cached_tokens=600, cache_write_tokens=100, output_tokens=9,
                                          reasoning_tokens=30)
    got = call(api, server, stream=stream)
    assert (got.text, got.thinking) == ("Four, as it happens.", "2+2 is 4.")
    # One Answer reads as the same usage everywhere: the whole prompt, its cached part, output, reasoning.
    assert (got.prompt, got.cached, got.output, got.reasoning) == (1000, 600, 9, 30)
    req = server.requests[-1]
    assert (req.provider, req.stream, req.system) == (api, stream, "Be brief.")
    assert req.messages == [{"role": r, "text": t} for r, t in CONVERSATION]


@pytest.mark.parametrize("api", APIS)
def test_estimated_tokens_and_no_thinking(server, api):
    got = call(api, server)
    chars = sum(len(t) for _, t in CONVERSATION) + len("Be brief.")
    assert (got.text, got.thinking, got.prompt, got.output, got.reasoning) == ("ok", None, chars // 4, 1, 0)


@pytest.mark.parametrize("api", APIS)
def test_rate_limit_carries_retry_after(server, api):
    server.fail_next(Fault("rate_limit", seconds=0.2))
    err = failure(api, server)
    expected = {"anthropic": anthropic.RateLimitError, "gemini": genai_errors.ClientError}
    assert isinstance(err, expected.get(api, openai.RateLimitError))
    assert status_of(err) == 429
    assert err.response.headers["retry-after"] == "0.2"
    assert call(api, server).text == "ok"  # the fault was used up


ERRORS = {  # fault -> (anthropic class, openai class, genai class, statuses anthropic/openai/gemini)
    "overloaded": ("OverloadedError", "InternalServerError", "ServerError", (529, 503, 503)),
    "server_error": ("InternalServerError", "InternalServerError", "ServerError", (500, 500, 500)),
    "context_too_long": ("BadRequestError", "BadRequestError", "ClientError", (400,) * 3),
    "auth": ("AuthenticationError", "AuthenticationError", "ClientError", (401, 401, 400)),
    "bad_request": ("BadRequestError", "BadRequestError", "ClientError", (400,) * 3),
}


@pytest.mark.parametrize("kind", ERRORS)
def test_error_faults_become_the_sdk_exceptions(server, kind):
    *names, statuses = ERRORS[kind]
    classes = [getattr(sdk, name) for sdk, name in zip((anthropic, openai, genai_errors), names)]
    for api, stream in [(api, stream) for api in APIS for stream in (False, True)]:
        server.fail_next(kind)
        err = failure(api, server, stream=stream)
        index = {"anthropic": 0, "gemini": 2}.get(api, 1)
        assert type(err) is classes[index], (api, stream, err)
        assert status_of(err) == statuses[index]
    if kind == "context_too_long":  # the messages adapters recognise
        server.fail_next(kind, kind, kind)
        assert "prompt is too long" in failure("anthropic", server).body["error"]["message"]
        assert failure("openai-chat", server).code == "context_length_exceeded"
        assert "exceeds the maximum number of tokens" in failure("gemini", server).message


def test_faults_are_taken_in_order_across_providers(server):
    server.fail_next("server_error", Fault("overloaded"), "empty")
    assert status_of(failure("gemini", server)) == 500
    assert status_of(failure("anthropic", server)) == 529
    assert call("openai-chat", server).text == ""
    assert call("openai-responses", server).text == "ok"


@pytest.mark.parametrize("api", APIS)
def test_malformed_drop_and_empty(server, api):
    for stream in (False, True):
        server.fail_next("malformed")  # every SDK raises a ValueError (JSONDecodeError or genai's own)
        assert isinstance(failure(api, server, stream=stream), ValueError)
        server.fail_next("drop")
        err = failure(api, server, stream=stream)
        # google-genai does not wrap transport errors: the raw httpx2 exception comes out
        assert isinstance(err, (anthropic.APIConnectionError, openai.APIConnectionError,
                                httpx2.RemoteProtocolError))
        server.fail_next("empty")
        assert call(api, server, stream=stream).text == ""


@pytest.mark.parametrize("api", APIS)
def test_slow_answer_trips_the_client_timeout(server, api):
    server.fail_next(Fault("slow", seconds=5))
    start = time.monotonic()
    err = failure(api, server, timeout=0.2)
    assert time.monotonic() - start < 2
    assert isinstance(err, (anthropic.APITimeoutError, openai.APITimeoutError, httpx2.TimeoutException))


def test_latency_and_a_failing_responder(server):
    server.latency_s = 0.2
    start = time.monotonic()
    assert call("gemini", server).text == "ok"
    assert time.monotonic() - start >= 0.2
    server.latency_s, server.responder = 0.0, lambda req: 1 / 0
    err = failure("anthropic", server)
    assert isinstance(err, anthropic.InternalServerError) and "ZeroDivisionError" in str(err)
    assert isinstance(server.errors.pop(), ZeroDivisionError)


def test_close_is_prompt_while_a_request_sleeps():
    server = ProviderServer()
    server.fail_next(Fault("slow", seconds=30))
    caller = threading.Thread(target=lambda: pytest.raises(Exception, call, "anthropic", server),  # noqa: B017
                              daemon=True)  # any failure will do: the server closed under it
    caller.start()
    time.sleep(0.2)
    start = time.monotonic()
    server.close()
    caller.join(2)
    assert time.monotonic() - start < 1 and not caller.is_alive()


@pytest.mark.parametrize("api", APIS)
def test_api_keys_and_known_models(api):
    with ProviderServer(api_keys={"good"}, known_models={"claude-test", "gpt-test", "gemini-test"}) as server:
        err = failure(api, server, key="bad")
        assert status_of(err) == (400 if api == "gemini" else 401)
        if api == "gemini":
            assert "API_KEY_INVALID" in json.dumps(err.details)
        assert call(api, server, key="good").text == "ok"
        assert status_of(failure(api, server, key="good", model="no-such-model")) == 404


def test_model_info_endpoints():
    with ProviderServer(known_models={"claude-test", "gpt-test", "gemini-test"}) as server:
        a = anthropic.Anthropic(api_key="k", base_url=server.url, max_retries=0)
        o = openai.OpenAI(api_key="k", base_url=server.openai_url, max_retries=0)
        g = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=server.url))
        assert a.models.retrieve("claude-test").id == "claude-test"
        assert o.models.retrieve("gpt-test").id == "gpt-test"
        assert g.models.get(model="gemini-test").name == "models/gemini-test"
        with pytest.raises(anthropic.NotFoundError):
            a.models.retrieve("claude-nope")
        with pytest.raises(openai.NotFoundError):
            o.models.retrieve("gpt-nope")
        with pytest.raises(genai_errors.ClientError):
            g.models.get(model="gemini-nope")
        assert [r.provider for r in server.requests] == ["anthropic", "openai", "gemini"] * 2


def test_odd_input_gets_a_provider_shaped_400(server):
    with httpx2.Client(base_url=server.url) as http:
        answer = http.post("/v1/messages", content=b"{not json", headers={"x-api-key": "k"})
        assert (answer.status_code, answer.json()["error"]["type"]) == (400, "invalid_request_error")
        answer = http.post("/v1/chat/completions", content=b"[1, 2]")
        assert answer.status_code == 400 and "message" in answer.json()["error"]
        answer = http.post("/v1beta/models/m:generateContent?key=k", content=b"\xff\xfe")
        assert answer.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert call("anthropic", server).text == "ok"  # still serving


def _limited(api, server, stream, limit):
    """(text, output tokens, reasoning tokens, how it ended) of one call asking for at most `limit` tokens."""
    messages = [{"role": "user", "content": "hi"}]
    if api == "anthropic":
        kwargs = dict(model="claude-test", max_tokens=limit, messages=messages)
        c = client("anthropic", server, 5.0, "k")
        if stream:
            with c.messages.stream(**kwargs) as s:
                m = s.get_final_message()
        else:
            m = c.messages.create(**kwargs)
        reasoning = m.usage.output_tokens_details.thinking_tokens if m.usage.output_tokens_details else 0
        text = "".join(b.text for b in m.content if b.type == "text")
        return text, m.usage.output_tokens - reasoning, reasoning, m.stop_reason
    if api == "openai-responses":
        c = client("openai", server, 5.0, "k")
        if stream:  # the SDK's stream helper insists on response.completed: read the raw events
            events = list(c.responses.create(model="gpt-test", input="hi", max_output_tokens=limit, stream=True))
            r = events[-1].response
            assert events[-1].type == f"response.{r.status}"
        else:
            r = c.responses.create(model="gpt-test", input="hi", max_output_tokens=limit)
        reasoning = r.usage.output_tokens_details.reasoning_tokens
        text = "".join(part.text for item in r.output if item.type == "message" for part in item.content)
        return text, r.usage.output_tokens - reasoning, reasoning, \
            r.incomplete_details.reason if r.incomplete_details else r.status
    if api == "openai-chat":
        c = client("openai", server, 5.0, "k")
        if stream:
            chunks = list(c.chat.completions.create(model="gpt-test", messages=messages, max_tokens=limit,
                                                    stream=True, stream_options={"include_usage": True}))
            text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
            finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1]
            u = chunks[-1].usage
        else:
            done = c.chat.completions.create(model="gpt-test", messages=messages, max_tokens=limit)
            text, finish, u = done.choices[0].message.content, done.choices[0].finish_reason, done.usage
        reasoning = u.completion_tokens_details.reasoning_tokens
        return text, u.completion_tokens - reasoning, reasoning, finish
    c = client("gemini", server, 5.0, "k")
    kwargs = dict(model="gemini-test", contents="hi", config=types.GenerateContentConfig(max_output_tokens=limit))
    chunks = list(c.models.generate_content_stream(**kwargs)) if stream else [c.models.generate_content(**kwargs)]
    text = "".join(p.text for ch in chunks for p in (ch.candidates[0].content.parts or []) if not p.thought)
    u = chunks[-1].usage_metadata
    return text, u.candidates_token_count, u.thoughts_token_count or 0, chunks[-1].candidates[0].finish_reason.value


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", APIS)
def test_an_answer_longer_than_the_output_limit_is_cut_and_says_so(server, api, stream):
    server.responder = lambda req: Answer("x" * 10_000, thinking="hmm", reasoning_tokens=24)
    text, output, reasoning, finish = _limited(api, server, stream, 1024)
    assert (len(text), output, reasoning) == ((1024 - 24) * 4, 1000, 24)  # reasoning counts against the limit
    assert finish == {"anthropic": "max_tokens", "openai-responses": "max_output_tokens", "openai-chat": "length",
                      "gemini": "MAX_TOKENS"}[api]
    text, output, reasoning, finish = _limited(api, server, stream, 20)  # all of it thinking
    assert (text, output, reasoning) == ("", 0, 20)
    server.responder = lambda req: Answer("short")
    assert _limited(api, server, stream, 1024)[0] == "short"  # within the limit: whole


@pytest.mark.parametrize("api", APIS)
def test_each_api_words_a_cut_answer_its_own_way(server, api):
    server.responder = lambda req: Answer("A long answer that goes on.", finish="length")
    if api == "anthropic":
        message = client("anthropic", server, 5.0, "k").messages.create(
            model="claude-test", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        assert message.stop_reason == "max_tokens"
    elif api == "openai-responses":
        response = client("openai", server, 5.0, "k").responses.create(model="gpt-test", input="hi")
        assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    elif api == "openai-chat":
        completion = client("openai", server, 5.0, "k").chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "hi"}])
        assert completion.choices[0].finish_reason == "length"
    else:
        response = client("gemini", server, 5.0, "k").models.generate_content(model="gemini-test", contents="hi")
        assert response.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
