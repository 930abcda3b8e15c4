"""A station whose agents (and reviewer, grader, debugger) talk to real SDK clients, served by
the loopback `ProviderServer` with answers written by our offline scripted policies.

Used by tests/test_remote_station.py and scripts/bench_turns.py. The answers are a pure
function of the request, so two runs that send the same conversations get the same replies.
"""
from __future__ import annotations

import threading
import time
from typing import Any

from provider_server import Answer, ProviderServer, Request

from station.core.model_api import estimate_conversation, estimate_tokens
from station.models.scripted import ScriptedModel
from station.models.scripted_debugger import ScriptedDebugger
from station.models.scripted_grader import ScriptedGrader
from station.models.scripted_reviewer import ScriptedReviewer

KEY = "loopback-test-key"
KEY_ENV = {"ANTHROPIC_API_KEY": KEY, "OPENAI_API_KEY": KEY, "GEMINI_API_KEY": KEY}

# Five agents on the three providers (one per model name, so each agent's requests are told apart).
AGENT_MODELS = [
    {"provider": "anthropic", "name": "claude-station-test"},
    {"provider": "openai", "name": "gpt-station-test", "api": "responses"},
    {"provider": "openai", "name": "local-station-test", "api": "chat"},
    {"provider": "gemini", "name": "gemini-pro-station-test"},
    {"provider": "gemini", "name": "gemini-flash-station-test"},
]
ROLE_MODELS = {
    "reviewer": {"provider": "anthropic", "name": "reviewer-station-test"},
    "grading": {"provider": "openai", "name": "grader-station-test", "api": "chat"},
    "debugger": {"provider": "gemini", "name": "debugger-station-test"},
}
PRICES = {m["name"]: {"input": 2.0, "cached_input": 0.5, "output": 10.0}
          for m in AGENT_MODELS + list(ROLE_MODELS.values())}


def endpoint(server: ProviderServer, model: dict[str, Any]) -> dict[str, Any]:
    base = server.openai_url if model["provider"] == "openai" else server.url
    return {**model, "base_url": base, "retry_base_s": 0.05, "retry_max_s": 0.2, "max_retries": 4,
            "timeout_s": 20, "context_limit": 400_000}


def remote_config(server: ProviderServer, **overrides: Any) -> dict[str, Any]:
    """The social demo's world with five remote agents and remote reviewer and grader."""
    from helpers import demo_config

    cfg = demo_config()
    cfg["name"] = "remote"
    cfg["agents"] = [{"count": 1, "kind": "guest", "model": endpoint(server, m)} for m in AGENT_MODELS]
    cfg["grading"] = {"model": endpoint(server, ROLE_MODELS["grading"])}
    cfg["reviewer"] = {"model": endpoint(server, ROLE_MODELS["reviewer"])}
    cfg["debugger"] = {"model": endpoint(server, ROLE_MODELS["debugger"])}
    cfg["prices"] = PRICES
    cfg.update(overrides)
    return cfg


def scripted_responder(seed: int = 0):
    """Answers as our offline policies would; the cached share is the part repeated from last turn."""
    agents = ScriptedModel("scripted-remote", seed)
    roles = {"grader": ScriptedGrader("scripted-grader"), "reviewer": ScriptedReviewer("scripted-reviewer"),
             "debugger": ScriptedDebugger("scripted-debugger")}

    def respond(request: Request) -> Answer:
        role = next((r for r in roles if request.model.startswith(r)), None)
        model = roles[role] if role else agents
        reply = model.complete(request.messages, system=request.system, agent="remote")
        prompt = estimate_conversation(request.messages, request.system)
        repeated = estimate_conversation(request.messages[:-1], request.system) if len(request.messages) > 2 else 0
        return Answer(reply.text, thinking=f"Thinking about tick {len(request.messages)}.",
                      input_tokens=prompt, cached_tokens=repeated, output_tokens=estimate_tokens(reply.text) + 4,
                      reasoning_tokens=7)
    return respond


def count_in_flight(server: ProviderServer, seconds: float = 0.2) -> dict[str, int]:
    """Make each answer take `seconds`, and count the requests the server holds at once:
    `most` is the largest number seen."""
    answer, lock, flight = server.responder, threading.Lock(), {"now": 0, "most": 0}

    def slow_answer(request: Request) -> Any:
        with lock:
            flight["now"] += 1
            flight["most"] = max(flight["most"], flight["now"])
        time.sleep(seconds)
        with lock:
            flight["now"] -= 1
        return answer(request)

    server.responder = slow_answer
    return flight

