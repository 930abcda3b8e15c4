"""A fake LLM provider on loopback, for testing the real SDK clients end to end.

`ProviderServer` answers HTTP on 127.0.0.1 the way the Anthropic Messages API, the OpenAI
Responses and Chat Completions APIs and the Gemini API do, closely enough that the official
`anthropic`, `openai` and `google-genai` clients, pointed at it through `base_url`, parse its
answers into their usual objects. Tests use it to exercise what mocks cannot: retries and
`retry-after`, each SDK's exception classes, usage and prompt-cache accounting, streaming.

    with ProviderServer() as server:
        server.responder = lambda req: Answer("hi", thinking="hmm", cached_tokens=50)
        server.fail_next("rate_limit", Fault("slow", seconds=5))
        client = anthropic.Anthropic(api_key="k", base_url=server.url, max_retries=0)
        ...
        assert server.requests[-1].messages[-1]["text"] == "hello"

The clients: `anthropic.Anthropic(base_url=server.url)`, `openai.OpenAI(base_url=server.openai_url)`,
`genai.Client(http_options=types.HttpOptions(base_url=server.url))` (google-genai 3.x asks for
/v1/models/...; /v1beta works too). `server.reset()` makes one server reusable across tests, and
`server.errors` keeps whatever went wrong inside it (a raising responder, say).

Local servers: `ProviderServer(flavor="llama.cpp", n_ctx=4096, one_at_a_time=True)` behaves like
llama.cpp's server: no GET /v1/models/{id} and no /v1/responses (404, llama.cpp's error shape),
GET /v1/models listing the served model with llama.cpp's `meta` (n_ctx_train, ...), GET /props
with `default_generation_settings.n_ctx`, and a prompt longer than n_ctx refused with 400
`exceed_context_size_error` carrying `n_prompt_tokens` and `n_ctx`. `flavor="vllm"` lists
`max_model_len` and refuses prompt + max_tokens beyond it with vLLM's message; `flavor="ollama"`
answers POST /api/show (model_info `<arch>.context_length`, `num_ctx` in parameters when n_ctx is
given). `one_at_a_time` serves one generation at a time (llama-cpp-python's lock, a one-slot
llama.cpp), so two concurrent requests take twice as long as one.

Load: `server.peak_in_flight` is the most generation requests it was serving at once (from
reading a request to its last byte of answer), `server.connections` the TCP connections it
accepted, and each `Request.at` the `time.monotonic()` it arrived. It accepts a backlog of 4,096
connections, so a thousand clients connecting at once are not turned away. Run as a script
(`python tests/provider_server.py --latency 1`), it serves in its own process, prints its URL,
and when its standard input closes prints those two counts as JSON and stops: a benchmark's
client then does not share its interpreter.

Tools: `Answer("text", tool_calls=[{"name": "run", "arguments": {"command": "ls"}}])` answers with
calls (text optional), ids generated, in each provider's own shape: Anthropic `tool_use` blocks
(streamed as content_block_start + input_json_delta pieces, stop_reason "tool_use"), Responses
`function_call` output items (`call_id`, `arguments` as JSON text), Chat `message.tool_calls`
(streamed in pieces, finish_reason "tool_calls"), Gemini `functionCall` parts (no ids, as Google
sends them; the first call carries a thoughtSignature). Arguments given as a string are sent as
that text, so malformed JSON can be served. Each `Request.tools` lists the names of the tools the
request offers, and `Request.messages` decodes tool turns of every format into one neutral shape:
`{"role": "assistant", "text", "tool_calls": [{"id", "name", "arguments"}]}` (arguments decoded
from JSON text where they were sent as text) and `{"role": "tool", "results": [{"id", "name",
"text"}]}` (the name looked up from the call where the format gives only the id), so a responder
can play a scripted tool-using policy.

Every flavor cuts an answer longer than the request's output limit (max_tokens,
max_output_tokens, maxOutputTokens; reasoning tokens count against it) to that many tokens, four
characters a token, and says so the provider's way: finish_reason "length", status "incomplete"
(max_output_tokens), stop_reason "max_tokens", finishReason MAX_TOKENS. `Answer(finish="length")`
forces that ending without cutting.

Token accounting is the same for every provider, so one `Answer` means one thing everywhere:
`Answer.input_tokens` is the whole prompt (cached and cache-written tokens included) and
`Answer.output_tokens` the visible output, `reasoning_tokens` excluded. Each provider then
reports them its own way (see `_tokens` and the `_*_usage` functions).
"""
from __future__ import annotations

import base64
import contextlib
import json
import re
import socket
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

FAULT_KINDS = ("rate_limit", "overloaded", "server_error", "malformed", "slow", "drop",
               "context_too_long", "auth", "bad_request", "empty")
FLAVORS = ("cloud", "llama.cpp", "vllm", "ollama")
LENGTH = "length"  # Answer.finish of an answer cut at the request's output limit


@dataclass
class Request:
    """One received request, as recorded (see the module docstring)."""
    provider: str  # "anthropic" | "openai-responses" | "openai-chat" | "gemini"; "openai" for GET /v1/models
    path: str
    model: str
    body: dict
    headers: dict[str, str]  # lower-cased names
    stream: bool
    messages: list[dict]  # [{"role": "user" | "assistant", "text": ...}], tool turns too (module docstring)
    system: str | None
    method: str = "POST"
    at: float = 0.0  # time.monotonic() when it arrived
    tools: list[str] = field(default_factory=list)  # the names of the tools offered


@dataclass
class Answer:
    """What the fake model says. Token counts left None are estimated from the text."""
    text: str
    thinking: str | None = None
    input_tokens: int | None = None  # whole prompt; None: chars of messages + system // 4
    cached_tokens: int = 0  # part of input_tokens read from the prompt cache
    cache_write_tokens: int = 0  # part of input_tokens written to the cache (Anthropic only)
    output_tokens: int | None = None  # visible output; None: len(text) // 4 + 1
    reasoning_tokens: int = 0  # thinking tokens, on top of output_tokens
    finish: str = "stop"  # or LENGTH: the answer ran into the request's output limit
    # [{"name", "arguments"}]: arguments a dict, or text sent as it is (malformed JSON, say)
    tool_calls: list[dict] = field(default_factory=list)


@dataclass
class Fault:
    """A failure to serve instead of the next answer.

    `seconds` is the `retry-after` of "rate_limit" (default 1, fractions allowed, 0 leaves
    the header out; also sent with "overloaded"/"server_error" when given) and how long
    "slow" waits before answering (default 60).
    """
    kind: str
    seconds: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {self.kind!r}; expected one of {FAULT_KINDS}")


def default_responder(request: Request) -> Answer:
    return Answer(text="ok")


# --------------------------------------------------------------------------- request parsing

def _text_of(content: Any) -> str:
    """The text parts of one message's content, joined; thinking parts, tool calls and tool
    results are not text."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return ""
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif not isinstance(part, dict) or part.get("thought") or part.get("type") in (
                "thinking", "redacted_thinking", "reasoning", "tool_use", "tool_result"):
            continue
        elif isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif "parts" in part:  # gemini systemInstruction
            texts.append(_text_of(part["parts"]))
    return "\n".join(t for t in texts if t)


def _arguments(raw: Any) -> Any:
    """A call's arguments as sent: decoded when they are JSON text, else as they came."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


class _Turns:
    """The conversation being decoded, in the neutral shapes (module docstring)."""

    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.names: dict[str, str] = {}  # call id -> tool name, for results that give only the id

    def say(self, role: str, text: str) -> None:
        self.messages.append({"role": "assistant" if role in ("assistant", "model") else "user", "text": text})

    def call(self, call_id: Any, name: Any, arguments: Any) -> None:
        """A tool call: it joins the assistant message just before it, or makes one."""
        if not self.messages or self.messages[-1]["role"] != "assistant":
            self.say("assistant", "")
        self.names[str(call_id)] = str(name)
        call = {"id": call_id, "name": name, "arguments": _arguments(arguments)}
        self.messages[-1].setdefault("tool_calls", []).append(call)

    def result(self, call_id: Any, text: str, name: Any = None) -> None:
        """A tool result: it joins the tool message just before it, or makes one."""
        if not self.messages or self.messages[-1]["role"] != "tool":
            self.messages.append({"role": "tool", "results": []})
        name = name if name is not None else self.names.get(str(call_id), "")
        self.messages[-1]["results"].append({"id": call_id, "name": name, "text": text})


def _parts(content: Any) -> list[dict]:
    return [part for part in (content if isinstance(content, list) else []) if isinstance(part, dict)]


def _gemini_turn(turns: _Turns, turn: dict) -> None:
    parts = _parts(turn.get("parts"))
    results = [p.get("functionResponse", p.get("function_response")) for p in parts]
    for response in (r for r in results if isinstance(r, dict)):
        output = response.get("response")
        text = output["output"] if isinstance(output, dict) and isinstance(output.get("output"), str) else \
            json.dumps(output)
        turns.result(response.get("id"), text, response.get("name"))
    text = _text_of(parts)
    if text or not any(isinstance(r, dict) for r in results):
        turns.say(turn.get("role", "user"), text)
    for call in (p.get("functionCall", p.get("function_call")) for p in parts):
        if isinstance(call, dict):
            turns.call(call.get("id"), call.get("name"), call.get("args", {}))


def _anthropic_turn(turns: _Turns, turn: dict) -> None:
    content = turn.get("content")
    blocks = _parts(content)
    for block in blocks:
        if block.get("type") == "tool_result":
            turns.result(block.get("tool_use_id"), _text_of(block.get("content")))
    text = _text_of(content)
    if text or not any(b.get("type") in ("tool_result", "tool_use") for b in blocks):
        turns.say(turn.get("role", "user"), text)
    for block in blocks:
        if block.get("type") == "tool_use":
            turns.call(block.get("id"), block.get("name"), block.get("input"))


def _openai_turn(turns: _Turns, turn: dict) -> None:
    """A Chat message or a Responses input item."""
    kind = turn.get("type")
    if kind == "function_call":
        return turns.call(turn.get("call_id"), turn.get("name"), turn.get("arguments"))
    if kind == "function_call_output":
        return turns.result(turn.get("call_id"), _text_of(turn.get("output")))
    if turn.get("role") == "tool":
        return turns.result(turn.get("tool_call_id"), _text_of(turn.get("content")))
    calls = [c for c in turn.get("tool_calls") or [] if isinstance(c, dict)]
    if turn.get("role") in ("user", "assistant"):
        turns.say(turn["role"], _text_of(turn.get("content")))
    for call in calls:
        function = call.get("function") or {}
        turns.call(call.get("id"), function.get("name"), function.get("arguments"))


def _conversation(provider: str, body: dict) -> tuple[list[dict], str | None]:
    """Normalise the request's conversation to (messages, system)."""
    turns = _Turns()
    system: list[str] = []
    if provider == "gemini":
        for turn in body.get("contents") or []:
            if isinstance(turn, dict):
                _gemini_turn(turns, turn)
        if body.get("systemInstruction") is not None:
            system.append(_text_of(body["systemInstruction"]))
        return turns.messages, "\n".join(system) if system else None
    if provider == "anthropic":
        items = body.get("messages") or []
        if body.get("system") is not None:
            system.append(_text_of(body["system"]))
    elif provider == "openai-chat":
        items = body.get("messages") or []
    else:  # openai-responses: `input` is a string or a list of items
        items = body.get("input") or []
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        if isinstance(body.get("instructions"), str):
            system.append(body["instructions"])
    for turn in items if isinstance(items, list) else []:
        if not isinstance(turn, dict):
            continue
        if turn.get("role") in ("system", "developer"):
            system.append(_text_of(turn.get("content")))
        elif provider == "anthropic":
            _anthropic_turn(turns, turn)
        else:
            _openai_turn(turns, turn)
    return turns.messages, "\n".join(system) if system else None


def _offered(provider: str, body: dict) -> list[str]:
    """The names of the tools the request offers."""
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    if provider == "gemini":
        tools = [d for t in tools for d in t.get("functionDeclarations", t.get("function_declarations")) or []]
    elif provider == "openai-chat":
        tools = [t.get("function") or {} for t in tools]
    return [str(t.get("name")) for t in tools if isinstance(t, dict)]


def _is_google(headers: dict[str, str], query: str) -> bool:
    return "x-goog-api-client" in headers or "x-goog-api-key" in headers or "key" in parse_qs(query)


def _route(method: str, path: str, headers: dict[str, str], query: str) -> tuple[str, str, str]:
    """(provider, endpoint, model) for a request; endpoint is "generate", "model" or "unknown".

    google-genai 3.x defaults to API version v1, so `GET /v1/models/{id}` is asked by all three
    SDKs; the headers tell them apart (only Anthropic's sends anthropic-version).
    """
    if _is_google(headers, query) or path.startswith(("/v1beta/", "/v1alpha/")):
        found = re.fullmatch(r"/v1\w*/models/([^/:]+)(:generateContent|:streamGenerateContent)?", path)
        if found and method == ("POST" if found.group(2) else "GET"):
            return "gemini", "generate" if found.group(2) else "model", found.group(1)
        return "gemini", "unknown", ""
    family = "anthropic" if "anthropic-version" in headers else "openai"
    found = re.fullmatch(r"/v1/models/(.+)", path)
    if method == "GET" and found:
        return family, "model", found.group(1)
    local = {("GET", "/v1/models"): "list", ("GET", "/props"): "props", ("POST", "/api/show"): "show"}
    if family == "openai" and (method, path) in local:  # listing (OpenAI too) and local servers' own routes
        return "openai", local[(method, path)], ""
    posts = {"/v1/messages": "anthropic", "/v1/responses": "openai-responses",
             "/v1/chat/completions": "openai-chat"}
    if method == "POST" and path in posts:
        return posts[path], "generate", ""
    return family, "unknown", ""


def _family(provider: str) -> str:
    return "openai" if provider.startswith("openai") else provider


# --------------------------------------------------------------------------- error bodies

# (kind, family) -> (http status, error type / Google status, message, OpenAI code)
_ERRORS: dict[tuple[str, str], tuple[int, str, str, str | None]] = {
    ("rate_limit", "anthropic"): (429, "rate_limit_error", "This request would exceed the rate limit for your "
                                  "organization of 50 requests per minute. Please try again later.", None),
    ("rate_limit", "openai"): (429, "requests", "Rate limit reached for {model} on requests per min (RPM): "
                               "Limit 500, Used 500, Requested 1. Please try again later.", "rate_limit_exceeded"),
    ("rate_limit", "gemini"): (429, "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your "
                               "plan and billing details.", None),
    ("overloaded", "anthropic"): (529, "overloaded_error", "Overloaded", None),
    ("overloaded", "openai"): (503, "server_error", "The server is overloaded or not ready yet.", None),
    ("overloaded", "gemini"): (503, "UNAVAILABLE", "The model is overloaded. Please try again later.", None),
    ("server_error", "anthropic"): (500, "api_error", "Internal server error", None),
    ("server_error", "openai"): (500, "server_error", "The server had an error while processing your "
                                 "request. Sorry about that!", None),
    ("server_error", "gemini"): (500, "INTERNAL", "An internal error has occurred. Please retry or report "
                                 "in https://developers.generativeai.google/guide/troubleshooting", None),
    ("context_too_long", "anthropic"): (400, "invalid_request_error",
                                        "prompt is too long: 250000 tokens > 200000 maximum", None),
    ("context_too_long", "openai"): (400, "invalid_request_error", "This model's maximum context length is "
                                     "128000 tokens. However, your messages resulted in 250000 tokens. Please "
                                     "reduce the length of the messages.", "context_length_exceeded"),
    ("context_too_long", "gemini"): (400, "INVALID_ARGUMENT", "The input token count (1250000) exceeds the "
                                     "maximum number of tokens allowed (1048576).", None),
    ("auth", "anthropic"): (401, "authentication_error", "invalid x-api-key", None),
    ("auth", "openai"): (401, "invalid_request_error", "Incorrect API key provided: {key}. You can find your "
                         "API key at https://platform.openai.com/account/api-keys.", "invalid_api_key"),
    ("auth", "gemini"): (400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", None),
    ("bad_request", "anthropic"): (400, "invalid_request_error", "Invalid request.", None),
    ("bad_request", "openai"): (400, "invalid_request_error", "Invalid request.", None),
    ("bad_request", "gemini"): (400, "INVALID_ARGUMENT", "Request contains an invalid argument.", None),
    ("bad_json", "anthropic"): (400, "invalid_request_error", "There was an error parsing the body of "
                                "your request as JSON.", None),
    ("bad_json", "openai"): (400, "invalid_request_error", "We could not parse the JSON body of your "
                             "request. The OpenAI API expects a JSON payload.", None),
    ("bad_json", "gemini"): (400, "INVALID_ARGUMENT", "Invalid JSON payload received.", None),
    ("not_found", "anthropic"): (404, "not_found_error", "model: {model}", None),
    ("not_found", "openai"): (404, "invalid_request_error", "The model `{model}` does not exist or you do "
                              "not have access to it.", "model_not_found"),
    ("not_found", "gemini"): (404, "NOT_FOUND", "models/{model} is not found for API version {version}, or is "
                              "not supported for generateContent.", None),
    ("no_route", "anthropic"): (404, "not_found_error", "Not Found", None),
    ("no_route", "openai"): (404, "invalid_request_error", "Invalid URL ({path})", None),
    ("no_route", "gemini"): (404, "NOT_FOUND", "The requested URL {path} was not found on this server.", None),
}


def _llama_error(status: int, message: str, etype: str, **fields: Any) -> tuple[int, dict, dict[str, str]]:
    """An error as llama.cpp's server words it: code, message, type, and any numbers beside them."""
    return status, {"error": {"code": status, "message": message, "type": etype, **fields}}, {}


def _local_no_route(flavor: str, path: str) -> tuple[int, Any, dict[str, str]]:
    if flavor == "llama.cpp":
        return _llama_error(404, "File Not Found", "not_found_error")
    if flavor == "vllm":
        return 404, {"detail": "Not Found"}, {}  # FastAPI's own 404
    return 404, b"404 page not found", {}  # Ollama (Go's mux) answers plain text


def _masked(key: str) -> str:
    return key[:3] + "*" * 4 + key[-4:] if len(key) > 8 else "****"


def error_response(kind: str, family: str, *, seconds: float | None = None, message: str | None = None,
                   **fields: str) -> tuple[int, dict, dict[str, str]]:
    """(status, JSON body, headers) of one error, in the family's real shape."""
    status, etype, template, code = _ERRORS[(kind, family)]
    message = message or template.format_map({"model": "", "key": "", "path": "", "version": "", **fields})
    headers = {"retry-after": f"{seconds:g}"} if seconds else {}
    if family == "anthropic":
        request_id = "req_" + uuid.uuid4().hex[:24]
        headers["request-id"] = request_id
        return status, {"type": "error", "error": {"type": etype, "message": message},
                        "request_id": request_id}, headers
    if family == "openai":
        param = "messages" if kind == "context_too_long" else None
        headers["x-request-id"] = "req_" + uuid.uuid4().hex
        return status, {"error": {"message": message, "type": etype, "param": param, "code": code}}, headers
    error: dict[str, Any] = {"code": status, "message": message, "status": etype}
    if kind == "auth":  # Google's answer to a bad key: 400, with the reason in ErrorInfo
        error["details"] = [
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
             "domain": "googleapis.com", "metadata": {"service": "generativelanguage.googleapis.com"}},
            {"@type": "type.googleapis.com/google.rpc.LocalizedMessage", "locale": "en-US", "message": message}]
    elif kind == "rate_limit" and seconds:  # Google puts the delay in RetryInfo, not a header
        error["details"] = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{seconds:g}s"}]
    return status, {"error": error}, headers


# --------------------------------------------------------------------------- answers, per provider

def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def _pieces(text: str, size: int = 8) -> list[str]:
    """Split text into stream deltas so clients really have to join them."""
    return [text[i:i + size] for i in range(0, len(text), size)]


def _tokens(answer: Answer, request: Request) -> tuple[int, int]:
    """(whole prompt tokens, visible output tokens), estimating the ones left None."""
    prompt = answer.input_tokens
    if prompt is None:
        chars = sum(_chars(m) for m in request.messages) + len(request.system or "")
        prompt = chars // 4
    calls = "".join(c["name"] + _arguments_text(c) for c in answer.tool_calls)
    output = answer.output_tokens if answer.output_tokens is not None else len(answer.text + calls) // 4 + 1
    return prompt, output


def _chars(message: dict) -> int:
    """A decoded message's length: its text, its calls' names and arguments, its results' text."""
    calls = "".join(str(c["name"]) + json.dumps(c["arguments"]) for c in message.get("tool_calls", ()))
    return len(message.get("text") or "") + len(calls) + sum(len(r["text"]) for r in message.get("results", ()))


def _arguments_text(call: dict) -> str:
    """A call's arguments as the wire carries them: JSON text (or the text given, as it is)."""
    arguments = call.get("arguments", {})
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _anthropic_usage(answer: Answer, request: Request) -> dict:
    prompt, output = _tokens(answer, request)
    usage = {  # Anthropic's input_tokens leaves out cache reads and writes; output counts thinking
        "input_tokens": max(0, prompt - answer.cached_tokens - answer.cache_write_tokens),
        "cache_creation_input_tokens": answer.cache_write_tokens,
        "cache_read_input_tokens": answer.cached_tokens,
        "output_tokens": output + answer.reasoning_tokens,
        "service_tier": "standard",
    }
    if answer.reasoning_tokens:
        usage["output_tokens_details"] = {"thinking_tokens": answer.reasoning_tokens}
    return usage


def _signature(text: str) -> str:
    return base64.b64encode(("sig:" + text[:32]).encode()).decode()


def anthropic_message(answer: Answer, request: Request) -> dict:
    content: list[dict] = []
    if answer.thinking is not None:
        content.append({"type": "thinking", "thinking": answer.thinking, "signature": _signature(answer.thinking)})
    if answer.text:  # the real API sends no text block at all for an empty answer
        content.append({"type": "text", "text": answer.text})
    content += [{"type": "tool_use", "id": _new_id("toolu_"), "name": c["name"], "input": c.get("arguments", {})}
                for c in answer.tool_calls]
    return {"id": _new_id("msg_"), "type": "message", "role": "assistant", "model": request.model,
            "content": content, "stop_reason": _anthropic_stop(answer), "stop_sequence": None,
            "usage": _anthropic_usage(answer, request)}


def _anthropic_stop(answer: Answer) -> str:
    return "max_tokens" if answer.finish == LENGTH else "tool_use" if answer.tool_calls else "end_turn"


def anthropic_events(answer: Answer, request: Request) -> Iterator[tuple[str | None, dict]]:
    final = anthropic_message(answer, request)
    start = {**final, "content": [], "stop_reason": None, "usage": {**final["usage"], "output_tokens": 1}}
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for index, block in enumerate(final["content"]):
        kind = block["type"]
        if kind == "tool_use":  # the arguments come as pieces of JSON text
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {**block, "input": {}}}
            for piece in _pieces(_arguments_text({"arguments": block["input"]}), 16):
                delta = {"type": "input_json_delta", "partial_json": piece}
                yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
            continue
        empty = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" else \
            {"type": "text", "text": ""}
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": empty}
        for piece in _pieces(block[kind]):
            delta = {"type": f"{kind}_delta", kind: piece}
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        if kind == "thinking":
            delta = {"type": "signature_delta", "signature": block["signature"]}
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    usage = {k: v for k, v in final["usage"].items() if k != "service_tier"}
    yield "message_delta", {"type": "message_delta", "usage": usage,
                            "delta": {"stop_reason": _anthropic_stop(answer), "stop_sequence": None}}
    yield "message_stop", {"type": "message_stop"}


def _openai_counts(answer: Answer, request: Request) -> tuple[int, int, int]:
    """(prompt, output with reasoning, total): OpenAI's output counts reasoning tokens."""
    prompt, output = _tokens(answer, request)
    output += answer.reasoning_tokens
    return prompt, output, prompt + output


def _responses_usage(answer: Answer, request: Request) -> dict:
    prompt, output, total = _openai_counts(answer, request)
    return {"input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": answer.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": output, "output_tokens_details": {"reasoning_tokens": answer.reasoning_tokens},
            "total_tokens": total}


def _responses_items(answer: Answer, ids: tuple[str, str]) -> list[dict]:
    items = []
    status = "incomplete" if answer.finish == LENGTH else "completed"
    if answer.thinking is not None:
        items.append({"id": ids[0], "type": "reasoning", "status": "completed",
                      "summary": [{"type": "summary_text", "text": answer.thinking}]})
    if answer.text or not answer.tool_calls:  # an answer of calls alone has no message item
        items.append({"id": ids[1], "type": "message", "role": "assistant", "status": status,
                      "content": [{"type": "output_text", "text": answer.text, "annotations": [], "logprobs": []}]})
    items += [{"id": _new_id("fc_"), "type": "function_call", "status": "completed", "call_id": _new_id("call_"),
               "name": c["name"], "arguments": _arguments_text(c)} for c in answer.tool_calls]
    return items


def responses_object(answer: Answer, request: Request, *, response_id: str | None = None,
                     ids: tuple[str, str] | None = None) -> dict:
    cut = answer.finish == LENGTH  # OpenAI: an incomplete response, and why
    return {
        "id": response_id or _new_id("resp_"), "object": "response", "created_at": int(time.time()),
        "status": "incomplete" if cut else "completed", "completed_at": None if cut else int(time.time()),
        "model": request.model,
        "output": _responses_items(answer, ids or (_new_id("rs_"), _new_id("msg_"))),
        "usage": _responses_usage(answer, request),
        "error": None, "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "instructions": request.body.get("instructions"),
        "metadata": {}, "parallel_tool_calls": True, "temperature": 1.0, "top_p": 1.0,
        "tool_choice": "auto", "tools": [], "text": {"format": {"type": "text"}},
        "reasoning": {"effort": None, "summary": None}, "store": False, "truncation": "disabled",
    }


def responses_events(answer: Answer, request: Request) -> Iterator[tuple[str | None, dict]]:
    """The event sequence the Responses API streams, so `responses.stream()` can rebuild it."""
    response_id, ids = _new_id("resp_"), (_new_id("rs_"), _new_id("msg_"))
    final = responses_object(answer, request, response_id=response_id, ids=ids)
    pending = {**final, "status": "in_progress", "completed_at": None, "output": [], "usage": None}
    events: list[dict] = [{"type": "response.created", "response": pending},
                          {"type": "response.in_progress", "response": pending}]
    for index, item in enumerate(final["output"]):
        common = {"item_id": item["id"], "output_index": index}
        if item["type"] == "reasoning":
            part = item["summary"][0]
            events += [{"type": "response.output_item.added", "output_index": index,
                        "item": {**item, "status": "in_progress", "summary": []}},
                       {"type": "response.reasoning_summary_part.added", **common, "summary_index": 0,
                        "part": {**part, "text": ""}}]
            events += [{"type": "response.reasoning_summary_text.delta", **common, "summary_index": 0,
                        "delta": piece} for piece in _pieces(part["text"])]
            events += [{"type": "response.reasoning_summary_text.done", **common, "summary_index": 0,
                        "text": part["text"]},
                       {"type": "response.reasoning_summary_part.done", **common, "summary_index": 0,
                        "part": part}]
        elif item["type"] == "function_call":
            events += [{"type": "response.output_item.added", "output_index": index,
                        "item": {**item, "status": "in_progress", "arguments": ""}}]
            events += [{"type": "response.function_call_arguments.delta", **common, "delta": piece}
                       for piece in _pieces(item["arguments"], 16)]
            events += [{"type": "response.function_call_arguments.done", **common, "name": item["name"],
                        "arguments": item["arguments"]}]
        else:
            part = item["content"][0]
            events += [{"type": "response.output_item.added", "output_index": index,
                        "item": {**item, "status": "in_progress", "content": []}},
                       {"type": "response.content_part.added", **common, "content_index": 0,
                        "part": {**part, "text": ""}}]
            events += [{"type": "response.output_text.delta", **common, "content_index": 0, "delta": piece,
                        "logprobs": []} for piece in _pieces(part["text"])]
            events += [{"type": "response.output_text.done", **common, "content_index": 0,
                        "text": part["text"], "logprobs": []},
                       {"type": "response.content_part.done", **common, "content_index": 0, "part": part}]
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.incomplete" if answer.finish == LENGTH else "response.completed",
                   "response": final})
    for number, event in enumerate(events):
        yield event["type"], {**event, "sequence_number": number}


def _chat_usage(answer: Answer, request: Request) -> dict:
    prompt, output, total = _openai_counts(answer, request)
    return {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": total,
            "prompt_tokens_details": {"cached_tokens": answer.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": answer.reasoning_tokens}}


def _chat_calls(answer: Answer) -> list[dict]:
    return [{"id": _new_id("call_"), "type": "function",
             "function": {"name": c["name"], "arguments": _arguments_text(c)}} for c in answer.tool_calls]


def _chat_finish(answer: Answer) -> str:
    return "tool_calls" if answer.tool_calls and answer.finish != LENGTH else answer.finish


def chat_completion(answer: Answer, request: Request) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": answer.text, "refusal": None}
    if answer.tool_calls:  # the content of an answer of calls alone is null
        message.update(content=answer.text or None, tool_calls=_chat_calls(answer))
    if answer.thinking is not None:  # non-standard, as vLLM and DeepSeek send it
        message["reasoning_content"] = answer.thinking
    return {"id": _new_id("chatcmpl-"), "object": "chat.completion", "created": int(time.time()),
            "model": request.model, "system_fingerprint": None,
            "choices": [{"index": 0, "message": message, "finish_reason": _chat_finish(answer), "logprobs": None}],
            "usage": _chat_usage(answer, request)}


def chat_chunks(answer: Answer, request: Request) -> Iterator[tuple[str | None, dict]]:
    """Chunks as OpenAI streams them; usage comes last, and only if stream_options asks for it."""
    with_usage = bool((request.body.get("stream_options") or {}).get("include_usage"))
    base = {"id": _new_id("chatcmpl-"), "object": "chat.completion.chunk", "created": int(time.time()),
            "model": request.model, "system_fingerprint": None}
    extra = {"usage": None} if with_usage else {}

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {**base, **extra, "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                                              "logprobs": None}]}

    yield None, chunk({"role": "assistant", "content": ""})
    for piece in _pieces(answer.thinking or ""):
        yield None, chunk({"reasoning_content": piece})
    for piece in _pieces(answer.text):
        yield None, chunk({"content": piece})
    for index, call in enumerate(_chat_calls(answer)):  # the first piece names the call, the rest add arguments
        function = call["function"]
        yield None, chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                           "function": {"name": function["name"], "arguments": ""}}]})
        for piece in _pieces(function["arguments"], 16):
            yield None, chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield None, chunk({}, _chat_finish(answer))
    if with_usage:
        yield None, {**base, "choices": [], "usage": _chat_usage(answer, request)}


def _gemini_usage(answer: Answer, request: Request) -> dict:
    prompt, output = _tokens(answer, request)
    usage = {"promptTokenCount": prompt, "candidatesTokenCount": output,
             "totalTokenCount": prompt + output + answer.reasoning_tokens,
             "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]}
    if answer.cached_tokens:  # Google leaves zero counts out
        usage["cachedContentTokenCount"] = answer.cached_tokens
    if answer.reasoning_tokens:
        usage["thoughtsTokenCount"] = answer.reasoning_tokens
    return usage


def _gemini_chunk(parts: list[dict], request: Request, usage: dict, finish: str | None, response_id: str) -> dict:
    content: dict[str, Any] = {"role": "model"}
    if parts:  # an empty answer comes back with no parts at all
        content["parts"] = parts
    candidate: dict[str, Any] = {"content": content, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": request.model,
            "responseId": response_id}


def _gemini_parts(answer: Answer, size: int | None = None) -> list[dict]:
    """Thought parts, then answer parts; whole, or cut into stream-sized pieces."""
    cut = (lambda text: _pieces(text, size)) if size else (lambda text: [text] if text else [])
    thoughts = [{"text": piece, "thought": True} for piece in cut(answer.thinking or "")]
    texts = [{"text": piece} for piece in cut(answer.text)]
    calls = [{"functionCall": {"name": c["name"], "args": c.get("arguments", {})}} for c in answer.tool_calls]
    if calls:  # Gemini signs the first function call (and wants the signature back with it)
        calls[0]["thoughtSignature"] = _signature(calls[0]["functionCall"]["name"])
    elif thoughts and texts:  # ... else the first answer part after thoughts
        texts[0]["thoughtSignature"] = _signature(answer.thinking or "")
    return thoughts + texts + calls


def gemini_response(answer: Answer, request: Request) -> dict:
    return _gemini_chunk(_gemini_parts(answer), request, _gemini_usage(answer, request), _gemini_finish(answer),
                         uuid.uuid4().hex[:22])


def _gemini_finish(answer: Answer) -> str:
    return "MAX_TOKENS" if answer.finish == LENGTH else "STOP"


def gemini_chunks(answer: Answer, request: Request) -> Iterator[tuple[str | None, dict]]:
    """One part per chunk; early chunks carry only the prompt count, as Google's do."""
    response_id, usage = uuid.uuid4().hex[:22], _gemini_usage(answer, request)
    running = {"promptTokenCount": usage["promptTokenCount"], "totalTokenCount": usage["promptTokenCount"]}
    parts = _gemini_parts(answer, 8)
    for part in parts[:-1]:
        yield None, _gemini_chunk([part], request, running, None, response_id)
    yield None, _gemini_chunk(parts[-1:], request, usage, _gemini_finish(answer), response_id)


def model_info(family: str, model: str) -> dict:
    if family == "anthropic":
        return {"type": "model", "id": model, "display_name": model, "created_at": "2025-01-01T00:00:00Z",
                "lifecycle": "active", "max_input_tokens": 200000, "max_tokens": 64000}
    if family == "openai":
        return {"id": model, "object": "model", "created": 1700000000, "owned_by": "system"}
    return {"name": f"models/{model}", "version": "001", "displayName": model, "description": model,
            "inputTokenLimit": 1048576, "outputTokenLimit": 65536, "thinking": True,
            "supportedGenerationMethods": ["generateContent", "countTokens"]}


def output_limit(request: Request) -> int | None:
    """The output tokens the request allows, where it says (each API names the field its own way)."""
    body = request.body
    if request.provider == "anthropic":
        value = body.get("max_tokens")
    elif request.provider == "openai-responses":
        value = body.get("max_output_tokens")
    elif request.provider == "openai-chat":
        value = body.get("max_completion_tokens") or body.get("max_tokens")
    else:
        config = body.get("generationConfig") or {}
        value = config.get("maxOutputTokens", config.get("max_output_tokens"))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def within_limit(answer: Answer, request: Request, limit: int | None) -> Answer:
    """The answer cut at `limit` output tokens (reasoning first, then four characters a token)."""
    prompt, output = _tokens(answer, request)
    if limit is None or output + answer.reasoning_tokens <= limit:
        return answer
    reasoning = min(answer.reasoning_tokens, limit)
    visible = limit - reasoning
    return replace(answer, text=answer.text[:visible * 4], input_tokens=prompt, output_tokens=visible,
                   reasoning_tokens=reasoning, finish=LENGTH)


_RENDER = {"anthropic": (anthropic_message, anthropic_events),
           "openai-responses": (responses_object, responses_events),
           "openai-chat": (chat_completion, chat_chunks),
           "gemini": (gemini_response, gemini_chunks)}


# --------------------------------------------------------------------------- HTTP plumbing

class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like the real APIs; SSE bodies are chunked
    disable_nagle_algorithm = True  # else headers and body in two writes cost a 40 ms delayed ACK
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, True)

    def finish(self) -> None:
        self.server.owner._track(self.connection, False)
        try:
            super().finish()
        except OSError:
            pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        try:
            self.server.owner._handle(self, method)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. its timeout fired)
        except Exception as exc:  # noqa: BLE001 - a bug here must not kill the server; tests can read .errors
            self.server.owner.errors.append(exc)
            self.close_connection = True

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def start_sse(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def send_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_sse(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a handler stuck on a slow client must not block exit
    request_queue_size = 4096  # listen backlog: the default 5 drops connections of a burst (1 s SYN retries)
    owner: ProviderServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]  # a client hanging up is routine; anything else is kept for tests
        if error is not None and not isinstance(error, OSError):
            self.owner.errors.append(error)


def _sse(event: str | None, data: dict | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    return ((f"event: {event}\n" if event else "") + f"data: {payload}\n\n").encode()


class ProviderServer:
    """Loopback server speaking Anthropic, OpenAI and Gemini wire formats (module docstring)."""

    def __init__(self, responder: Callable[[Request], Answer | str] | None = None, *,
                 latency_s: float = 0.0, api_keys: set[str] | None = None,
                 known_models: set[str] | None = None, flavor: str = "cloud", n_ctx: int | None = None,
                 n_ctx_train: int = 32768, one_at_a_time: bool = False, listing: bool = True,
                 port: int = 0, share_port: bool = False) -> None:
        """`port` 0 picks a free one; `share_port` lets several server processes listen on one port
        (SO_REUSEPORT: the kernel spreads the connections), as a benchmark's server of many cores.
        `flavor`, `n_ctx` (the served context), `n_ctx_train` (the model's trained context, which
        llama.cpp and Ollama report) and `one_at_a_time`: see the module docstring. `known_models`
        are also the models a local server lists ("local-model" if None); `listing=False` takes
        GET /v1/models away (a server that cannot say what it serves)."""
        if flavor not in FLAVORS:
            raise ValueError(f"unknown flavor {flavor!r}; expected one of {FLAVORS}")
        self.responder = responder or default_responder
        self.latency_s = latency_s
        self.api_keys = api_keys
        self.known_models = known_models
        self.flavor, self.n_ctx, self.n_ctx_train = flavor, n_ctx, n_ctx_train
        self.one_at_a_time, self.listing = one_at_a_time, listing
        self._one_slot = threading.Lock()  # held by the generation being served, when one_at_a_time
        self.in_flight = self.peak_in_flight = self.connections = 0
        self.requests: list[Request] = []
        self.errors: list[BaseException] = []  # raised by the responder (answered 500) or by this code
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._stop = threading.Event()
        self._httpd = _HTTPServer(("127.0.0.1", port), _Handler, bind_and_activate=False)
        self._httpd.allow_reuse_port = share_port
        try:
            self._httpd.server_bind()
            self._httpd.server_activate()
        except BaseException:
            self._httpd.server_close()
            raise
        self._httpd.owner = self
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self.openai_url = self.url + "/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="provider-server", daemon=True)
        self._thread.start()

    def __enter__(self) -> ProviderServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def fail_next(self, *faults: Fault | str) -> None:
        """Queue faults; each generation request (any provider) takes the next one, in order."""
        with self._lock:
            self._faults.extend(f if isinstance(f, Fault) else Fault(f) for f in faults)

    def reset(self) -> None:
        """Back to a fresh state (default responder, nothing recorded or queued), to share one server."""
        with self._lock:
            self._faults.clear()
            self.requests.clear()
            self.errors.clear()
            self.peak_in_flight = self.connections = 0
        self.responder, self.latency_s = default_responder, 0.0

    def close(self) -> None:
        """Stop at once: wake sleeping "slow" handlers and cut open connections."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout=5)

    def _track(self, conn: socket.socket, alive: bool) -> None:
        with self._lock:
            (self._connections.add if alive else self._connections.discard)(conn)
            self.connections += alive

    @contextlib.contextmanager
    def _serving(self) -> Iterator[None]:
        with self._lock:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            yield
        finally:
            with self._lock:
                self.in_flight -= 1

    # ----------------------------------------------------------------------- one request

    def _handle(self, handler: _Handler, method: str) -> None:
        arrived = time.monotonic()
        split = urlsplit(handler.path)
        headers = {k.lower(): v for k, v in handler.headers.items()}
        provider, endpoint, model = _route(method, split.path, headers, split.query)
        family = _family(provider)
        raw = self._read_body(handler)
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        bad_json = not isinstance(body, dict)
        body = body if isinstance(body, dict) else {}
        if provider != "gemini" and isinstance(body.get("model"), str) and endpoint == "generate":
            model = body["model"]
        messages, system = _conversation(provider, body) if endpoint == "generate" else ([], None)
        stream = bool(body.get("stream") is True or "streamGenerateContent" in split.path)
        request = Request(provider, split.path, model, body, headers, stream, messages, system, method, arrived,
                          _offered(provider, body) if endpoint == "generate" else [])
        with self._lock:
            self.requests.append(request)

        endpoint = self._served(request.provider, endpoint)
        rejection = self._reject(family, endpoint, model, headers, split.query, bad_json, split.path)
        if rejection and rejection[0] == "no_route" and self.flavor != "cloud" and family == "openai":
            return handler.send_json(*_local_no_route(self.flavor, split.path))
        if rejection:
            return handler.send_json(*error_response(rejection[0], family, **rejection[1]))
        if endpoint == "model":
            return handler.send_json(200, model_info(family, model))
        if endpoint in ("list", "props", "show"):
            return handler.send_json(*getattr(self, f"_{endpoint}")(body))
        with self._lock:
            fault = self._faults.popleft() if self._faults else None
        with self._serving(), self._one_slot if self.one_at_a_time else contextlib.nullcontext():
            if self.latency_s and self._stop.wait(self.latency_s):
                handler.close_connection = True  # closing
                return
            self._answer(handler, request, fault)

    # ----------------------------------------------------------------------- local servers

    def _served(self, provider: str, endpoint: str) -> str:
        """The endpoint, or "unknown" where this flavor of server has no such route."""
        flavor = self.flavor
        if (endpoint == "props" and flavor != "llama.cpp") or (endpoint == "show" and flavor != "ollama"):
            return "unknown"
        if (endpoint == "model" and flavor in ("llama.cpp", "vllm")) or (endpoint == "list" and not self.listing):
            return "unknown"
        if provider == "openai-responses" and flavor == "llama.cpp":
            return "unknown"
        return endpoint

    def _names(self) -> list[str]:
        return sorted(self.known_models) if self.known_models is not None else ["local-model"]

    def _list(self, body: dict) -> tuple[int, dict, dict[str, str]]:
        """GET /v1/models, with the metadata each flavor adds to an entry."""
        entries = []
        for name in self._names():
            entry: dict[str, Any] = {"id": name, "object": "model", "created": 1700000000, "owned_by": "system"}
            if self.flavor == "llama.cpp":
                entry.update(owned_by="llamacpp", meta={"vocab_type": 2, "n_vocab": 151936,
                                                        "n_ctx_train": self.n_ctx_train, "n_embd": 1024,
                                                        "n_params": 596049920, "size": 639447040})
            elif self.flavor == "vllm":
                entry.update(owned_by="vllm", root=name, parent=None, max_model_len=self.n_ctx or 32768)
            elif self.flavor == "ollama":
                entry.update(owned_by="library")
            entries.append(entry)
        listing: dict[str, Any] = {"object": "list", "data": entries}
        if self.flavor == "llama.cpp":  # llama.cpp also answers in Ollama's shape
            listing = {"models": [{"name": e["id"], "model": e["id"], "type": "model"} for e in entries], **listing}
        return 200, listing, {}

    def _props(self, body: dict) -> tuple[int, dict, dict[str, str]]:
        """llama.cpp's GET /props: the served context is in default_generation_settings."""
        n_ctx = self.n_ctx or self.n_ctx_train
        return 200, {"default_generation_settings": {"n_ctx": n_ctx, "params": {"n_predict": -1, "temperature": 0.8}},
                     "total_slots": 1, "model_path": f"/models/{self._names()[0]}.gguf",
                     "chat_template": "{{ messages }}", "build_info": "b0000-provider-server"}, {}

    def _show(self, body: dict) -> tuple[int, dict, dict[str, str]]:
        """Ollama's POST /api/show: the model's trained context, and num_ctx when it is set."""
        name = body.get("model") or body.get("name") or ""
        if name not in self._names():
            return 404, {"error": f"model '{name}' not found"}, {}
        return 200, {"license": "", "modelfile": f"FROM {name}\n",
                     "parameters": f"num_ctx                        {self.n_ctx}" if self.n_ctx else "",
                     "template": "{{ .Prompt }}", "details": {"format": "gguf", "family": "qwen3"},
                     "model_info": {"general.architecture": "qwen3", "qwen3.context_length": self.n_ctx_train},
                     "capabilities": ["completion"]}, {}

    def _refusal(self, answer: Answer, request: Request) -> tuple[int, Any, dict[str, str]] | None:
        """A local server's answer to a prompt that does not fit its context."""
        prompt, _ = _tokens(answer, request)
        limit = output_limit(request) or 0
        if self.n_ctx is None:
            return None
        if self.flavor == "llama.cpp" and prompt >= self.n_ctx:
            return _llama_error(400, "the request exceeds the available context size, try increasing it",
                                "exceed_context_size_error", n_prompt_tokens=prompt, n_ctx=self.n_ctx)
        if self.flavor == "vllm" and prompt + limit > self.n_ctx:
            return 400, {"object": "error", "message": f"This model's maximum context length is {self.n_ctx} "
                         f"tokens. However, you requested {prompt + limit} tokens ({prompt} in the messages, "
                         f"{limit} in the completion). Please reduce the length of the messages or completion.",
                         "type": "BadRequestError", "param": None, "code": 400}, {}
        return None

    @staticmethod
    def _read_body(handler: _Handler) -> bytes:
        try:
            length = int(handler.headers.get("content-length") or 0)
        except ValueError:
            length = 0
        return handler.rfile.read(length) if length > 0 else b""

    def _reject(self, family: str, endpoint: str, model: str, headers: dict[str, str], query: str,
                bad_json: bool, path: str) -> tuple[str, dict] | None:
        """The error kind (and message fields) a real server would refuse this request with."""
        if endpoint == "unknown":
            return "no_route", {"path": path}
        if bad_json:
            return "bad_json", {}
        if self.api_keys is not None:
            key = self._api_key(family, headers, query)
            if key not in self.api_keys:
                return "auth", {"key": _masked(key or "")}
        bare = model.removeprefix("models/")
        checked = endpoint == "model" or (endpoint == "generate" and self.flavor != "llama.cpp")  # it ignores names
        if self.known_models is not None and checked and bare not in self.known_models:
            return "not_found", {"model": bare, "version": path.split("/")[1]}
        if endpoint == "generate" and family != "gemini" and not model:
            return "bad_request", {}
        return None

    @staticmethod
    def _api_key(family: str, headers: dict[str, str], query: str) -> str | None:
        bearer = headers.get("authorization", "")
        bearer = bearer[7:] if bearer.lower().startswith("bearer ") else None
        if family == "anthropic":  # the SDK sends api_key as a Bearer token; curl users send x-api-key
            return headers.get("x-api-key") or bearer
        if family == "openai":
            return bearer
        return headers.get("x-goog-api-key") or (parse_qs(query).get("key") or [None])[0]

    def _answer(self, handler: _Handler, request: Request, fault: Fault | None) -> None:
        kind = fault.kind if fault else None
        if kind == "drop":
            handler.close_connection = True  # close the socket without a byte of response
            return
        if kind == "slow" and self._stop.wait(60.0 if fault.seconds is None else fault.seconds):
            handler.close_connection = True  # closing: leave without answering
            return
        family = _family(request.provider)
        if kind not in (None, "slow", "malformed", "empty"):
            seconds = 1.0 if kind == "rate_limit" and fault.seconds is None else fault.seconds
            return handler.send_json(*error_response(kind, family, seconds=seconds, model=request.model,
                                                     key="****"))
        try:
            answer = Answer("") if kind == "empty" else self.responder(request)
        except Exception as exc:  # noqa: BLE001 - a broken responder is the test's bug: say so, keep serving
            self.errors.append(exc)
            return handler.send_json(*error_response("server_error", family, message=f"responder failed: {exc!r}"))
        answer = Answer(answer) if isinstance(answer, str) else answer
        refusal = self._refusal(answer, request) if self.flavor != "cloud" else None
        if refusal:
            return handler.send_json(*refusal)
        limit = output_limit(request)
        if self.flavor == "llama.cpp" and self.n_ctx:  # generation also stops when the context is full
            room = max(0, self.n_ctx - _tokens(answer, request)[0])
            limit = room if limit is None else min(limit, room)
        answer = within_limit(answer, request, limit)
        whole, events = _RENDER[request.provider]
        if not request.stream:
            body = json.dumps(whole(answer, request)).encode()
            return handler.send_json(200, body[: len(body) // 2] if kind == "malformed" else body)
        self._stream(handler, request, list(events(answer, request)), broken=kind == "malformed")

    @staticmethod
    def _stream(handler: _Handler, request: Request, events: list[tuple[str | None, dict]],
                broken: bool) -> None:
        handler.start_sse()
        if broken:  # a valid first event, then one whose data is cut off mid-JSON
            events = events[:1] + [(events[-1][0], '{"type": "content_block_delt')]
        for event, data in events:
            handler.send_chunk(_sse(event, data))
        if request.provider == "openai-chat" and not broken:
            handler.send_chunk(_sse(None, "[DONE]"))
        handler.end_sse()


def main() -> None:
    """Serve in this process until standard input closes, then print (as JSON) the most
    requests it served at once and the connections it accepted."""
    import argparse

    parser = argparse.ArgumentParser(description="the loopback provider server, in its own process")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    args = parser.parse_args()
    with ProviderServer(latency_s=args.latency) as server:
        print(server.url, flush=True)
        sys.stdin.read()
        print(json.dumps({"peak_in_flight": server.peak_in_flight, "connections": server.connections}), flush=True)


if __name__ == "__main__":
    main()
