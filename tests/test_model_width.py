"""Many calls at once to one provider endpoint, through the real SDK clients against the loopback
server: the bound on calls in flight, a rate limit that holds back every caller, connection
reuse, and the width the engine sizes its thread pool by.
"""

from __future__ import annotations

import threading

import pytest
from provider_server import Fault, ProviderServer

from station.core.config import ModelConfig
from station.core.model_api import INTERRUPTED
from station.models import ModelError, ModelPool, create_model

KEY = "width-test-key"
PROVIDERS = {
    "anthropic": dict(provider="anthropic"),
    "openai-chat": dict(provider="openai", api="chat"),
    "openai-responses": dict(provider="openai", api="responses"),
    "gemini": dict(provider="gemini"),
}
PROMPT = [{"role": "user", "text": "Tick 1. Where are you?"}]


@pytest.fixture
def server(monkeypatch):
    for env in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(env, KEY)
    with ProviderServer(api_keys={KEY}) as s:  # one per test: a rate limit it answers holds back its callers
        yield s


def config(server, which: str, name: str, **extra) -> ModelConfig:
    base = server.openai_url if which.startswith("openai") else server.url
    settings = dict(base_url=base, retry_base_s=0.01, retry_max_s=0.05, max_retries=3, timeout_s=20)
    return ModelConfig(**PROVIDERS[which], name=name, **{**settings, **extra})


def call_all(models, count: int) -> list:
    """`count` calls from as many threads, spread over `models`; the replies or errors."""
    results: list = [None] * count

    def one(i: int) -> None:
        try:
            results[i] = models[i % len(models)].complete(PROMPT, system=None, agent=f"Guest_{i}")
        except ModelError as err:
            results[i] = err

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


@pytest.mark.parametrize("which", PROVIDERS)
def test_models_on_one_endpoint_share_its_bound_on_calls_in_flight(server, which):
    server.latency_s = 0.3
    models = [create_model(config(server, which, name, max_in_flight=3)) for name in ("model-a", "model-b")]
    results = call_all(models, 12)
    assert [r.text for r in results] == ["ok"] * 12
    assert 2 <= server.peak_in_flight <= 3  # calls overlap, but never more than the bound


@pytest.mark.parametrize("which", ["anthropic", "openai-chat", "gemini"])
def test_a_rate_limit_holds_back_every_call_to_the_endpoint(server, which):
    """One call is told to wait a second: calls that start after it, other models' too, wait too."""
    server.fail_next(Fault("rate_limit", seconds=1.0))
    told = threading.Event()
    first = create_model(config(server, which, "model-a"), on_wait=lambda text: told.set())
    waiting = threading.Thread(target=lambda: first.complete(PROMPT, system=None, agent="Guest_0"))
    waiting.start()
    assert told.wait(20)  # it met the 429 and is waiting out the retry-after
    others = [create_model(config(server, which, name)) for name in ("model-a", "model-b")]
    results = call_all(others, 4)
    waiting.join(timeout=20)
    assert [r.text for r in results] == ["ok"] * 4
    limited, *later = [r for r in server.requests if r.method == "POST"]
    assert len(later) == 5
    assert all(r.at >= limited.at + 1.0 for r in later)  # nothing was sent before the second was up


def test_a_stop_ends_the_wait_of_calls_held_back():
    stop, told = threading.Event(), threading.Event()
    with ProviderServer() as server:
        server.fail_next(Fault("rate_limit", seconds=60))
        first = create_model(config(server, "openai-chat", "model-a"), stop=stop, on_wait=lambda text: told.set())
        results: list = []
        waiting = threading.Thread(target=lambda: results.extend(call_all([first], 1)))
        waiting.start()
        assert told.wait(20)
        threading.Timer(0.5, stop.set).start()
        results.extend(call_all([create_model(config(server, "openai-chat", "model-b"), stop=stop)], 3))
        waiting.join(timeout=20)
        assert [getattr(r, "kind", None) for r in results] == [INTERRUPTED] * 4
        assert len(server.requests) == 1  # the held-back calls never reached the server


@pytest.mark.parametrize("which", ["anthropic", "openai-responses", "gemini"])
def test_models_on_one_endpoint_reuse_its_connections(server, which):
    server.latency_s = 0.05
    models = [create_model(config(server, which, name, max_in_flight=4)) for name in ("model-a", "model-b")]
    for _ in range(3):
        assert [r.text for r in call_all(models, 8)] == ["ok"] * 8
    assert server.connections <= 4  # no more connections than calls in flight, kept from round to round


def test_width_counts_what_each_endpoint_lets_through(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "one-account")
    monkeypatch.setenv("OTHER_KEY", "another-account")
    proxy = dict(provider="openai", base_url="http://127.0.0.1:9/v1", max_in_flight=50)
    configs = (
        [dict(provider="scripted", name="scripted-newcomer")] * 7  # offline: one worker for them all
        + [dict(proxy, name="small")] * 30
        + [dict(proxy, name="large", max_in_flight=80)] * 40  # same endpoint: its smallest bound, 50
        + [dict(proxy, name="small", api_key_env="OTHER_KEY")] * 20  # another key: another bound
        + [dict(provider="anthropic", name="claude", max_in_flight=5)] * 9
    )
    assert ModelPool.width(configs) == 1 + 50 + 20 + 5
    pool = ModelPool()  # the models the engine holds count as their configs do
    assert ModelPool.width([pool.get(c) for c in configs]) == 1 + 50 + 20 + 5
    assert ModelPool.width([ModelConfig(provider="scripted")] * 3) == 1
    assert ModelPool.width([]) == 1


@pytest.mark.parametrize("which", PROVIDERS)
def test_a_long_conversation_reaches_the_server_whole_and_in_order(server, which):
    """The conversation is handed to the SDKs as it is sent (not message by message through their
    typed arguments): every message must still arrive, in order, with the system prompt."""
    conversation = [
        {"role": "assistant" if i % 2 else "user", "text": f"message {i}: " + "word " * (i % 7)} for i in range(59)
    ]
    reply = create_model(config(server, which, "model-a")).complete(conversation, system="Rules.", agent="Guest_1")
    sent = [r for r in server.requests if r.method == "POST"][-1]
    assert reply.text == "ok"
    assert sent.messages == conversation and sent.system == "Rules."


def test_extra_body_options_join_the_conversation(server):
    options = {"extra_body": {"top_k": 20}, "top_p": 0.5}  # e.g. a vLLM sampling option the SDK does not know
    model = create_model(config(server, "openai-chat", "model-a", options=options))
    model.complete(PROMPT, system=None, agent="Guest_1")
    body = server.requests[-1].body
    assert (body["top_k"], body["top_p"]) == (20, 0.5)
    assert body["messages"] == [{"role": "user", "content": PROMPT[0]["text"]}]
