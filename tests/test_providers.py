"""The three provider adapters, through the real SDK clients, against a loopback server that
speaks each provider's wire format: replies, thinking, usage, and every way a call can fail.
"""
from __future__ import annotations

import threading
import time

import pytest
from provider_server import Answer, Fault, ProviderServer

from station.core.config import ModelConfig
from station.core.model_api import INTERRUPTED, OVERFLOW, PERMANENT, TRANSIENT
from station.models import ModelError, create_model

KEY = "test-key"
PROVIDERS = {
    "anthropic": dict(provider="anthropic", name="claude-test"),
    "openai-responses": dict(provider="openai", name="gpt-test", api="responses"),
    "openai-chat": dict(provider="openai", name="local-test", api="chat"),
    "gemini": dict(provider="gemini", name="gemini-test"),
}
CONVERSATION = [{"role": "user", "text": "Tick 1. Where are you?"},
                {"role": "assistant", "text": "In the lobby."},
                {"role": "user", "text": "Tick 2. What now?"}]


@pytest.fixture(scope="module")
def server():
    with ProviderServer(api_keys={KEY}) as s:
        yield s


@pytest.fixture(autouse=True)
def fresh(server, monkeypatch):
    server.reset()
    server.api_keys = {KEY}
    for env in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(env, KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    yield


def model(server, which: str, **extra):
    base = server.openai_url if which.startswith("openai") else server.url
    settings = dict(base_url=base, retry_base_s=0.01, retry_max_s=0.05, max_retries=3, timeout_s=5)
    cfg = ModelConfig(**PROVIDERS[which], **{**settings, **extra})
    return create_model(cfg)


def generation_requests(server):
    return [r for r in server.requests if r.method == "POST"]


@pytest.mark.parametrize("which", PROVIDERS)
def test_a_reply_with_thinking_and_cached_usage(server, which):
    server.responder = lambda req: Answer("I go to the codex.", thinking="The codex explains the rules.",
                                          input_tokens=1200, cached_tokens=1000, output_tokens=9,
                                          reasoning_tokens=40)
    reply = model(server, which).complete(CONVERSATION, system="Be brief.", agent="Guest_1")
    assert reply.text == "I go to the codex."
    assert reply.thinking == "The codex explains the rules."
    assert reply.usage.input_tokens == 1200
    assert reply.usage.cached_input_tokens == 1000
    assert reply.usage.output_tokens == 9
    assert reply.usage.reasoning_tokens == 40
    assert reply.retries == 0 and reply.latency_s is not None
    sent = generation_requests(server)[-1]
    assert sent.messages == CONVERSATION and sent.system == "Be brief."


@pytest.mark.parametrize("which", PROVIDERS)
def test_rate_limit_waits_as_long_as_retry_after_asks(server, which):
    server.fail_next(Fault("rate_limit", seconds=0.6))
    began = time.monotonic()
    reply = model(server, which).complete(CONVERSATION, system=None, agent="Guest_1")
    assert time.monotonic() - began >= 0.6  # our own backoff is 0.05 s at most: the header ruled
    assert reply.text == "ok" and reply.retries == 1
    assert len(generation_requests(server)) == 2


@pytest.mark.parametrize("which", PROVIDERS)
@pytest.mark.parametrize("fault", ["server_error", "overloaded", "malformed", "drop", "empty"])
def test_transient_failures_are_retried(server, which, fault):
    server.fail_next(fault, fault)
    reply = model(server, which).complete(CONVERSATION, system=None, agent="Guest_1")
    assert reply.text == "ok" and reply.retries == 2
    assert len(generation_requests(server)) == 3


@pytest.mark.parametrize("which", PROVIDERS)
def test_a_slow_answer_times_out_and_is_asked_again(server, which):
    server.fail_next(Fault("slow", seconds=3))
    began = time.monotonic()
    reply = model(server, which, timeout_s=0.5).complete(CONVERSATION, system=None, agent="Guest_1")
    assert reply.text == "ok" and reply.retries == 1
    assert time.monotonic() - began < 2.5


@pytest.mark.parametrize("which", PROVIDERS)
def test_still_failing_after_every_retry_is_a_transient_error(server, which):
    server.fail_next(*["server_error"] * 4)
    with pytest.raises(ModelError) as err:
        model(server, which).complete(CONVERSATION, system=None, agent="Guest_1")
    assert err.value.kind == TRANSIENT and "after 3 retries" in str(err.value)
    assert len(generation_requests(server)) == 4


@pytest.mark.parametrize("which", PROVIDERS)
def test_an_empty_reply_is_accepted_after_the_last_retry(server, which):
    server.responder = lambda req: Answer("")
    reply = model(server, which).complete(CONVERSATION, system=None, agent="Guest_1")
    assert reply.text == "" and reply.retries == 3


@pytest.mark.parametrize("which", PROVIDERS)
def test_context_too_long_is_not_retried(server, which):
    server.fail_next("context_too_long")
    with pytest.raises(ModelError) as err:
        model(server, which).complete(CONVERSATION, system=None, agent="Guest_1")
    assert err.value.kind == OVERFLOW
    assert len(generation_requests(server)) == 1


@pytest.mark.parametrize("which", PROVIDERS)
@pytest.mark.parametrize("fault", ["auth", "bad_request"])
def test_permanent_errors_are_not_retried(server, which, fault):
    server.fail_next(fault)
    with pytest.raises(ModelError) as err:
        model(server, which).complete(CONVERSATION, system=None, agent="Guest_1")
    assert err.value.kind == PERMANENT
    assert len(generation_requests(server)) == 1


@pytest.mark.parametrize("which", PROVIDERS)
def test_a_wrong_key_is_permanent_and_says_so(server, which, monkeypatch):
    for env in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(env, "wrong-key")
    with pytest.raises(ModelError) as err:
        model(server, which).complete(CONVERSATION, system=None, agent="Guest_1")
    assert err.value.permanent and "key" in str(err.value).lower()


@pytest.mark.parametrize("which", ["anthropic", "openai-responses", "gemini"])
def test_a_missing_key_is_a_clear_permanent_error(server, which, monkeypatch):
    monkeypatch.delenv({"anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY"}.get(which, "OPENAI_API_KEY"))
    cfg = ModelConfig(**PROVIDERS[which])  # the provider's own endpoint: a key is required
    with pytest.raises(ModelError) as err:
        create_model(cfg)
    assert err.value.permanent and "set " in str(err.value)
    assert not server.requests


def test_a_local_openai_compatible_server_needs_no_key(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    server.api_keys = None
    reply = model(server, "openai-chat").complete(CONVERSATION, system=None, agent="Guest_1")
    assert reply.text == "ok"


def test_a_key_from_a_named_variable(server, monkeypatch):
    monkeypatch.setenv("MY_VLLM_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_KEY", "wrong-key")
    reply = model(server, "openai-chat", api_key_env="MY_VLLM_KEY").complete(CONVERSATION, system=None,
                                                                             agent="Guest_1")
    assert reply.text == "ok"


def test_stopping_cuts_a_long_backoff_short():
    with ProviderServer() as server:  # its own: the 30 s it asks for hold back every call to it
        server.fail_next(Fault("rate_limit", seconds=30))
        stop = threading.Event()
        cfg = ModelConfig(**PROVIDERS["gemini"], base_url=server.url, max_retries=3)
        slow = create_model(cfg, stop=stop)
        threading.Timer(0.3, stop.set).start()
        began = time.monotonic()
        with pytest.raises(ModelError) as err:
            slow.complete(CONVERSATION, system=None, agent="Guest_1")
        assert err.value.kind == INTERRUPTED and time.monotonic() - began < 5


def test_anthropic_marks_cache_breakpoints_on_a_stable_prefix(server):
    model(server, "anthropic").complete(CONVERSATION, system="Rules.", agent="Guest_1")
    body = generation_requests(server)[-1].body
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    marked = [i for i, m in enumerate(body["messages"]) if "cache_control" in m["content"][-1]]
    assert marked == [0, 2]  # the last two station messages: read last turn's cache, write this one's
    assert body["stream"] is True


def test_anthropic_cache_reads_and_writes_are_counted_as_input(server):
    server.responder = lambda req: Answer("ok", input_tokens=5000, cached_tokens=4000, cache_write_tokens=900)
    reply = model(server, "anthropic").complete(CONVERSATION, system=None, agent="Guest_1")
    assert (reply.usage.input_tokens, reply.usage.cached_input_tokens, reply.usage.cache_write_tokens) == \
        (5000, 4000, 900)


def test_empty_turns_in_the_history_are_sent_as_placeholder_text(server):
    history = [{"role": "user", "text": "one"}, {"role": "assistant", "text": ""}, {"role": "user", "text": "two"}]
    model(server, "anthropic").complete(history, system=None, agent="Guest_1")
    assert generation_requests(server)[-1].messages[1]["text"] == "(empty reply)"


def test_reasoning_settings_reach_the_wire(server):
    model(server, "anthropic", thinking_budget=2048, max_output_tokens=4096).complete(
        CONVERSATION, system=None, agent="A")
    model(server, "openai-responses", reasoning_effort="high").complete(CONVERSATION, system=None, agent="A")
    model(server, "gemini", thinking_budget=512, options={"top_p": 0.5}).complete(CONVERSATION, system=None,
                                                                                  agent="A")
    claude, gpt, gemini = [r.body for r in generation_requests(server)]
    assert claude["thinking"] == {"type": "enabled", "budget_tokens": 2048} and "temperature" not in claude
    assert gpt["reasoning"] == {"effort": "high", "summary": "auto"}
    thinking = gemini["generationConfig"]["thinkingConfig"]  # the SDK sends these in snake_case
    assert thinking.get("thinking_budget", thinking.get("thinkingBudget")) == 512
    assert gemini["generationConfig"]["topP"] == 0.5


@pytest.mark.parametrize("which", PROVIDERS)
def test_each_reply_records_why_it_ended(server, which):
    server.responder = lambda req: Answer("I go to the codex and then read every page of it, twice.")
    whole = model(server, which).complete(CONVERSATION, system=None, agent="Guest_1")
    assert whole.finish_reason == "stop" and whole.cut_tokens is None
    cut = model(server, which, max_output_tokens=5).complete(CONVERSATION, system=None, agent="Guest_1")
    assert cut.finish_reason == "length"  # finish_reason, status incomplete, stop_reason, finishReason
    assert cut.text == "I go to the codex an" and cut.cut_tokens == 5
    assert cut.to_payload()["finish_reason"] == "length"
    assert type(cut).from_payload(cut.to_payload()).cut_tokens == 5  # what a replay reads back


@pytest.mark.parametrize("which", PROVIDERS)
def test_context_too_long_names_the_numbers(server, which):
    server.fail_next("context_too_long")
    with pytest.raises(ModelError) as err:
        model(server, which, context_limit=300_000).complete(CONVERSATION, system=None, agent="Guest_1")
    limit, used = {"anthropic": ("200,000", "250,000"), "gemini": ("1,048,576", "1,250,000")}.get(
        which, ("128,000", "250,000"))
    assert f"the server's limit is {limit} tokens, this request had {used}" in str(err.value)
    assert "context_limit in the config is 300,000" in str(err.value)


@pytest.mark.parametrize("which", PROVIDERS)
def test_an_empty_reply_cut_by_max_output_tokens_is_not_asked_again(server, which):
    server.responder = lambda req: Answer("The answer.", thinking="Long thoughts.", reasoning_tokens=500)
    reply = model(server, which, max_output_tokens=100).complete(CONVERSATION, system=None, agent="Guest_1")
    assert (reply.text, reply.finish_reason, reply.retries, reply.cut_tokens) == ("", "length", 0, 100)
    assert len(generation_requests(server)) == 1
