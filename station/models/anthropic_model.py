"""Claude through the official `anthropic` SDK (Messages API, streamed).

Streaming keeps long replies (and long thinking) inside one healthy connection, which the
SDK insists on for large `max_tokens`. Prompt caching: the system prompt and the last two
station messages (tool results included) carry cache breakpoints, so each turn reads the
conversation written to the cache by the turn before and writes its own extension.

Tools go as `tools` ({name, description, input_schema}); the model's calls come back as
`tool_use` blocks, and their results go back as a user message of `tool_result` blocks. With
thinking on, the API wants a reply's thinking blocks back (signed) before its calls: the first
call of a reply keeps them, as "thinking_blocks", and they are sent back with it.
"""

from __future__ import annotations

from typing import Any

from station.core.config import ModelConfig
from station.core.model_api import LENGTH, Message, ModelError, Reply, Tool, Usage, estimate_tokens
from station.models import loop
from station.models.remote import (
    Failure,
    RemoteModel,
    api_key,
    classify_status,
    classify_transport,
    missing_key_message,
    short,
    tool_call,
)

CACHE = {"type": "ephemeral"}


def request_body(
    config: ModelConfig, messages: list[Message], system: str | None, tools: list[Tool] | None = None
) -> dict[str, Any]:
    wire = [
        wire_message(m)
        if "tool_calls" in m or "results" in m
        else {"role": m["role"], "content": [text_block(m["text"])]}
        for m in messages
    ]
    users = [i for i, m in enumerate(wire) if m["role"] == "user"]
    for i in users[-2:]:
        wire[i]["content"][-1]["cache_control"] = CACHE
    body: dict[str, Any] = {"model": config.name, "max_tokens": config.max_output_tokens, "messages": wire}
    if tools:
        body["tools"] = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]
    if system:
        body["system"] = [{"type": "text", "text": system, "cache_control": CACHE}]
    if config.thinking_budget:
        body["thinking"] = {"type": "enabled", "budget_tokens": config.thinking_budget}
    elif config.reasoning_effort:
        body["thinking"] = {"type": "adaptive", "display": "summarized"}
    if config.reasoning_effort:
        body["output_config"] = {"effort": "low" if config.reasoning_effort == "minimal" else config.reasoning_effort}
    if config.temperature not in (None, 1.0) and not body.get("thinking"):
        # Recent Claude models take no temperature (the SDK has no argument for it): only an
        # explicit non-default value is sent, as an extra field, for models that still accept it.
        body["extra_body"] = {"temperature": config.temperature}
    body.update(config.options)
    return body


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def wire_message(message: Message) -> dict[str, Any]:
    """A tool turn: calls (after the signed thinking that came with them) or their results."""
    if "results" in message:  # the results of the calls of the assistant message before it
        results = [{"type": "tool_result", "tool_use_id": r["id"], "content": r["text"]} for r in message["results"]]
        return {"role": "user", "content": results}
    calls = message.get("tool_calls") or ()
    content: list[dict[str, Any]] = list(calls[0].get("thinking_blocks") or ()) if calls else []
    content += [text_block(message["text"])] if message.get("text") else []
    content += [{"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["arguments"]} for c in calls]
    return {"role": message["role"], "content": content}


def reply_from(message: Any) -> Reply:
    text = "".join(b.text for b in message.content if b.type == "text")
    thinking = "\n\n".join(b.thinking for b in message.content if b.type == "thinking") or None
    u = message.usage
    read = u.cache_read_input_tokens or 0
    written = u.cache_creation_input_tokens or 0
    details = getattr(u, "output_tokens_details", None)
    reasoning = getattr(details, "thinking_tokens", None)
    if reasoning is None:  # older answers do not split it out: estimate from the visible thinking
        reasoning = min(u.output_tokens, estimate_tokens(thinking)) if thinking else 0
    usage = Usage(
        input_tokens=u.input_tokens + read + written,
        cached_input_tokens=read,
        cache_write_tokens=written,
        output_tokens=u.output_tokens - reasoning,
        reasoning_tokens=reasoning,
    )
    uses = [b for b in message.content if b.type == "tool_use"]
    calls = [tool_call(n, b.id, b.name, b.input) for n, b in enumerate(uses, 1)]
    signed = [_signed(b) for b in message.content if b.type in ("thinking", "redacted_thinking")]
    if calls and signed:
        calls[0]["thinking_blocks"] = signed
    return Reply(
        text=text,
        thinking=thinking,
        usage=usage,
        finish_reason=finish(getattr(message, "stop_reason", None)),
        tool_calls=calls,
    )


def _signed(block: Any) -> dict[str, Any]:
    """A thinking block as the API wants it back."""
    if block.type == "thinking":
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    return {"type": "redacted_thinking", "data": block.data}


def finish(stop_reason: Any) -> str | None:
    if stop_reason is None:
        return None
    if stop_reason == "max_tokens":
        return LENGTH
    return "stop" if stop_reason in ("end_turn", "stop_sequence") else str(stop_reason)


class AnthropicModel(RemoteModel):
    provider = "anthropic"

    def __init__(self, config: ModelConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        import anthropic  # imported here: an offline station never needs the SDK

        self._sdk = anthropic
        key = api_key(config)
        if key is None:
            raise ModelError(missing_key_message(config), permanent=True)
        self._key = key

    def _sdk_client(self, pool: Any) -> Any:
        return self._sdk.AsyncAnthropic(
            api_key=self._key,
            base_url=self.config.base_url,
            timeout=self.config.timeout_s,
            max_retries=0,
            http_client=pool,
        )  # we retry, the same way for every provider

    async def _request(
        self, client: Any, messages: list[Message], system: str | None, agent: str, tools: list[Tool] | None
    ) -> Reply:
        async with client.messages.stream(**request_body(self.config, messages, system, tools)) as stream:
            return reply_from(await stream.get_final_message())

    def classify(self, err: Exception) -> Failure:
        sdk = self._sdk
        if isinstance(err, sdk.APIStatusError):
            if err.status_code < 400:  # an error event inside a stream that had begun well
                return Failure("transient", f"the stream broke off: {_message(err)}")
            return classify_status(err.status_code, _message(err), err.response.headers)
        if isinstance(err, ValueError) and "tool parameter JSON" in str(err):  # the SDK could not read a call
            return Failure("transient", short(str(err), 200))
        return classify_transport(err) or Failure("permanent", f"unexpected {type(err).__name__}: {err}")

    def check(self) -> str:
        info = loop.run(self.client.models.retrieve(self.config.name))
        return f"model {info.id} is available"


def _message(err: Any) -> str:
    body = getattr(err, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message") or err)
    return str(err)
