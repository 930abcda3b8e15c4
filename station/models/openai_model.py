"""GPT models through the official `openai` SDK: the Responses API, or Chat Completions for
any OpenAI-compatible server (vLLM, Ollama, LM Studio, llama.cpp, ...) reached with `base_url`
(where Chat Completions is the default: most such servers have nothing else).

OpenAI caches long prompt prefixes on its own; the conversation only ever grows at its end,
and `prompt_cache_key` (the agent's name) keeps one agent's requests on the same cache.

Tools are function tools. Responses: the model's calls are `function_call` output items
(`call_id`, `arguments` as a JSON string), their results go back as `function_call_output`
items. Chat: `message.tool_calls`, answered by one `role: tool` message per call.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from station.core.config import ModelConfig
from station.core.model_api import LENGTH, Message, ModelError, Reply, Tool, Usage
from station.models import loop
from station.models.remote import (
    Failure,
    RemoteModel,
    api_key,
    classify_status,
    classify_transport,
    missing_key_message,
    tool_call,
)


def responses_body(
    config: ModelConfig, messages: list[Message], system: str | None, agent: str, tools: list[Tool] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": config.name,
        "max_output_tokens": config.max_output_tokens,
        "store": False,
        "input": flat(messages, lambda m: {"role": m["role"], "content": m["text"]}, responses_items),
        "prompt_cache_key": f"station-{agent}",
    }
    if tools:  # not strict: a strict schema must require every property, and ours leave some optional
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
                "strict": False,
            }
            for t in tools
        ]
    if system:
        body["instructions"] = system
    if config.reasoning_effort:
        body["reasoning"] = {"effort": config.reasoning_effort, "summary": "auto"}
    if config.temperature is not None:
        body["temperature"] = config.temperature
    body.update(config.options)
    return body


def flat(
    messages: list[Message],
    plain: Callable[[Message], dict[str, Any]],
    tool_turn: Callable[[Message], list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """The conversation on the wire: a message of text alone is one entry; a tool turn may be several
    (a message of text alone is told inline: this runs for every message of every call)."""
    wire: list[dict[str, Any]] = []
    for m in messages:
        if "tool_calls" in m or "results" in m:
            wire += tool_turn(m)
        else:
            wire.append(plain(m))
    return wire


def responses_items(message: Message) -> list[dict[str, Any]]:
    if "results" in message:
        return [{"type": "function_call_output", "call_id": r["id"], "output": r["text"]} for r in message["results"]]
    calls = message.get("tool_calls") or ()
    items = [{"role": message["role"], "content": message["text"]}] if message.get("text") or not calls else []
    return items + [
        {"type": "function_call", "call_id": c["id"], "name": c["name"], "arguments": json.dumps(c["arguments"])}
        for c in calls
    ]


def chat_body(
    config: ModelConfig, messages: list[Message], system: str | None, tools: list[Tool] | None = None
) -> dict[str, Any]:
    wire = ([{"role": "system", "content": system}] if system else []) + flat(
        messages, lambda m: {"role": m["role"], "content": m["text"]}, chat_messages
    )
    body: dict[str, Any] = {"model": config.name, "messages": wire, "max_tokens": config.max_output_tokens}
    if tools:
        body["tools"] = [
            {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
            for t in tools
        ]
    if config.reasoning_effort:
        body["reasoning_effort"] = config.reasoning_effort
    if config.temperature is not None:
        body["temperature"] = config.temperature
    body.update(config.options)
    return body


def chat_messages(message: Message) -> list[dict[str, Any]]:
    if "results" in message:
        return [{"role": "tool", "tool_call_id": r["id"], "content": r["text"]} for r in message["results"]]
    calls = message.get("tool_calls")
    if not calls:
        return [{"role": message["role"], "content": message.get("text") or ""}]
    wire = [
        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
        for c in calls
    ]
    return [{"role": "assistant", "content": message.get("text") or None, "tool_calls": wire}]


def conversation_as_is(body: dict[str, Any], key: str, placeholder: Any = None) -> dict[str, Any]:
    """The request with its conversation handed to the SDK as `extra_body`, which is sent as it
    is: the SDK checks each message of a typed argument against its schema first, some 0.2 ms a
    message (45 ms of CPU a call at 200 messages, a minute a tick at a thousand agents), and our
    messages, plain text, come out of that check unchanged. `placeholder` fills a required
    argument; the extra body's value replaces it on the wire."""
    body = dict(body)
    extra = {key: body.pop(key), **body.get("extra_body", {})}  # a user's extra_body (options) wins
    body["extra_body"] = extra
    if placeholder is not None:
        body[key] = placeholder
    return body


def _n(value: Any) -> int:
    return int(value or 0)


def reply_from_response(response: Any) -> Reply:
    summaries = [
        part.text
        for item in response.output
        if item.type == "reasoning"
        for part in (item.summary or [])
        if getattr(part, "text", None)
    ]
    u = response.usage
    reasoning = _n(getattr(u.output_tokens_details, "reasoning_tokens", 0)) if u else 0
    usage = (
        Usage(
            input_tokens=_n(u.input_tokens),
            output_tokens=_n(u.output_tokens) - reasoning,
            cached_input_tokens=_n(getattr(u.input_tokens_details, "cached_tokens", 0)),
            reasoning_tokens=reasoning,
        )
        if u
        else Usage()
    )
    calls = [item for item in response.output if item.type == "function_call"]
    return Reply(
        text=response.output_text or "",
        thinking="\n\n".join(summaries) or None,
        usage=usage,
        finish_reason=responses_finish(response),
        tool_calls=[tool_call(n, c.call_id, c.name, c.arguments) for n, c in enumerate(calls, 1)],
    )


def responses_finish(response: Any) -> str | None:
    status = getattr(response, "status", None)
    if status == "incomplete":
        reason = getattr(getattr(response, "incomplete_details", None), "reason", None)
        return LENGTH if reason in (None, "max_output_tokens") else str(reason)
    return "stop" if status == "completed" else (str(status) if status else None)


def chat_finish(choice: Any) -> str | None:
    reason = getattr(choice, "finish_reason", None)
    return None if reason is None else str(reason)  # "stop", "length" (= LENGTH), "content_filter", ...


def reply_from_chat(completion: Any) -> Reply:
    if not completion.choices:
        raise ValueError("the answer has no choices")
    choice = completion.choices[0]
    message = choice.message
    extra = message.model_extra or {}
    thinking = extra.get("reasoning_content") or extra.get("reasoning")  # vLLM, DeepSeek, Ollama
    u = completion.usage
    usage = Usage()
    if u is not None:
        reasoning = _n(getattr(u.completion_tokens_details, "reasoning_tokens", 0))
        usage = Usage(
            input_tokens=_n(u.prompt_tokens),
            output_tokens=_n(u.completion_tokens) - reasoning,
            cached_input_tokens=_n(getattr(u.prompt_tokens_details, "cached_tokens", 0)),
            reasoning_tokens=reasoning,
        )
    calls = [c for c in message.tool_calls or () if getattr(c, "function", None) is not None]  # not custom tools
    return Reply(
        text=message.content or "",
        thinking=str(thinking) if thinking else None,
        usage=usage,
        finish_reason=chat_finish(choice),
        tool_calls=[tool_call(n, c.id, c.function.name, c.function.arguments) for n, c in enumerate(calls, 1)],
    )


class OpenAIModel(RemoteModel):
    provider = "openai"

    def __init__(self, config: ModelConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        import openai  # imported here: an offline station never needs the SDK

        self._sdk = openai
        key = api_key(config)
        if key is None:
            if config.base_url is None:
                raise ModelError(missing_key_message(config), permanent=True)
            key = "no-key"  # local servers usually need none, but the SDK wants a string
        self._key = key

    def _sdk_client(self, pool: Any) -> Any:
        return self._sdk.AsyncOpenAI(
            api_key=self._key,
            base_url=self.config.base_url,
            timeout=self.config.timeout_s,
            max_retries=0,
            http_client=pool,
        )  # we retry, the same way for every provider

    async def _request(
        self, client: Any, messages: list[Message], system: str | None, agent: str, tools: list[Tool] | None
    ) -> Reply:
        if self.config.api == "chat":
            body = conversation_as_is(chat_body(self.config, messages, system, tools), "messages", [])
            return reply_from_chat(await client.chat.completions.create(**body))
        body = conversation_as_is(responses_body(self.config, messages, system, agent, tools), "input")
        return reply_from_response(await client.responses.create(**body))

    def classify(self, err: Exception) -> Failure:
        sdk = self._sdk
        if isinstance(err, sdk.APIStatusError):
            code = err.code if isinstance(getattr(err, "code", None), str) and not err.code.isdigit() else ""
            message = f"{err.message} {code}".strip()
            body = err.body if isinstance(err.body, dict) else {}
            fields = [f"{k}={body[k]}" for k in ("n_prompt_tokens", "n_ctx") if isinstance(body.get(k), int)]
            if fields and ", ".join(fields) not in message:  # llama.cpp puts the numbers beside the message
                message += f" ({', '.join(fields)})"
            if err.status_code == 404 and self._no_responses_api(err, message):
                return Failure(
                    "permanent",
                    f"this server has no Responses API (404 on /v1/responses); set api: chat "
                    f"in the model's config: {message}",
                )
            return classify_status(err.status_code, message, err.response.headers)
        if isinstance(err, ValueError) and "no choices" in str(err):
            return Failure("transient", str(err))
        return classify_transport(err) or Failure("permanent", f"unexpected {type(err).__name__}: {err}")

    @staticmethod
    def _no_responses_api(err: Any, message: str) -> bool:
        """A 404 for the Responses endpoint itself, not for the model named in the request."""
        request = getattr(err, "request", None)
        path = str(request.url.path) if request is not None else ""
        return path.rstrip("/").endswith("/responses") and "model" not in message.lower()

    def check(self) -> str:
        info = loop.run(self.client.models.retrieve(self.config.name))
        return f"model {info.id} is available"

    def listed_models(self) -> list[dict[str, Any]]:
        """GET /v1/models: what the server serves, each entry with whatever metadata it adds
        (llama.cpp's `meta`, vLLM's `max_model_len`, ...)."""

        async def listing() -> list[dict[str, Any]]:
            return [item.model_dump() async for item in self.client.models.list()]

        return loop.run(listing())
