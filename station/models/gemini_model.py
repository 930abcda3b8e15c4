"""Gemini through the official `google-genai` SDK (the Gemini API, keyed by GEMINI_API_KEY).

Gemini 2.5 and later cache repeated prompt prefixes implicitly; the conversation only grows at
its end, so each turn re-uses the previous one's prefix, and the cached share shows in usage.

Tools go as `function_declarations` (their JSON Schema as `parametersJsonSchema`); the model's
calls are `functionCall` parts (ids `call-<n>` where the server gives none, and the part's
thought signature kept as the call's "signature": Gemini 3 refuses a history without it), and
their results go back as `functionResponse` parts, the result's text as {"output": text}.
"""

from __future__ import annotations

import base64
import functools
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
    pool_limits,
    ssl_context,
    tool_call,
)


@functools.cache
def unused_blocking_pool() -> Any:
    import httpx2

    return httpx2.Client(verify=ssl_context())


def request_config(config: ModelConfig, system: str | None) -> dict[str, Any]:
    thinking: dict[str, Any] = {"include_thoughts": True}
    if config.thinking_budget is not None:
        thinking["thinking_budget"] = config.thinking_budget
    if config.reasoning_effort:
        thinking["thinking_level"] = config.reasoning_effort.upper()
    body: dict[str, Any] = {"max_output_tokens": config.max_output_tokens, "thinking_config": thinking}
    if system:
        body["system_instruction"] = system
    if config.temperature is not None:
        body["temperature"] = config.temperature
    body.update(config.options)
    return body


def contents(messages: list[Message]) -> list[dict[str, Any]]:
    return [
        {
            "role": "model" if m["role"] == "assistant" else "user",
            "parts": parts(m) if "tool_calls" in m or "results" in m else [{"text": m["text"]}],
        }
        for m in messages
    ]


def parts(message: Message) -> list[dict[str, Any]]:
    if "results" in message:
        return [
            {"functionResponse": {"id": r["id"], "name": r["name"], "response": {"output": r["text"]}}}
            for r in message["results"]
        ]
    calls = message.get("tool_calls") or ()
    wire: list[dict[str, Any]] = [{"text": message["text"]}] if message.get("text") or not calls else []
    for c in calls:
        part: dict[str, Any] = {"functionCall": {"id": c["id"], "name": c["name"], "args": c["arguments"]}}
        if c.get("signature"):
            part["thoughtSignature"] = c["signature"]
        wire.append(part)
    return wire


def declarations(tools: list[Tool]) -> list[dict[str, Any]]:
    return [
        {
            "functionDeclarations": [
                {"name": t.name, "description": t.description, "parametersJsonSchema": t.parameters} for t in tools
            ]
        }
    ]


def reply_from(response: Any) -> Reply:
    parts = []
    if response.candidates and response.candidates[0].content and response.candidates[0].content.parts:
        parts = response.candidates[0].content.parts
    text = "".join(p.text for p in parts if p.text and not p.thought)
    thinking = "\n\n".join(p.text for p in parts if p.text and p.thought) or None
    calls = [(p.function_call, p.thought_signature) for p in parts if p.function_call]
    u = response.usage_metadata
    usage = Usage()
    if u is not None:
        usage = Usage(
            input_tokens=u.prompt_token_count or 0,
            cached_input_tokens=u.cached_content_token_count or 0,
            output_tokens=u.candidates_token_count or 0,
            reasoning_tokens=u.thoughts_token_count or 0,
        )
    return Reply(
        text=text,
        thinking=thinking,
        usage=usage,
        finish_reason=finish(response.candidates[0].finish_reason if response.candidates else None),
        tool_calls=[called(n, call, signature) for n, (call, signature) in enumerate(calls, 1)],
    )


def called(number: int, call: Any, signature: bytes | None) -> dict[str, Any]:
    recorded = tool_call(number, call.id, call.name or "", call.args if call.args is not None else {})
    if signature:
        recorded["signature"] = base64.b64encode(signature).decode()
    return recorded


def finish(reason: Any) -> str | None:
    if reason is None:
        return None
    name = str(getattr(reason, "value", reason)).upper()
    if name == "MAX_TOKENS":
        return LENGTH
    return "stop" if name == "STOP" else name.lower()


class GeminiModel(RemoteModel):
    provider = "gemini"

    def __init__(self, config: ModelConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        from google import genai  # imported here: an offline station never needs the SDK
        from google.genai import errors, types

        self._errors, self._types = errors, types
        try:
            self._config(None)
        except Exception as err:  # noqa: BLE001 - pydantic's message names the bad option
            raise ModelError(f"gemini {config.name}: bad request settings: {err}", permanent=True) from None
        key = api_key(config)
        if key is None:
            raise ModelError(missing_key_message(config), permanent=True)
        self._genai, self._key = genai, key

    def _http_pool(self, connections: int) -> Any:
        import httpx2

        return httpx2.AsyncClient(limits=pool_limits(connections), verify=ssl_context(), follow_redirects=True)

    def _sdk_client(self, pool: Any) -> Any:
        # No retry_options: the SDK then never retries, and we do (the same way for every provider).
        # The blocking client is never used; given one, the SDK does not build its own for each client.
        options: dict[str, Any] = {
            "timeout": int(self.config.timeout_s * 1000),
            "httpx_client": unused_blocking_pool(),
            "httpx_async_client": pool,
        }
        if self.config.base_url:
            options["base_url"] = self.config.base_url
        return self._genai.Client(api_key=self._key, http_options=options)

    async def _request(
        self, client: Any, messages: list[Message], system: str | None, agent: str, tools: list[Tool] | None
    ) -> Reply:
        # The whole conversation goes as an extra body, sent as it is, in place of the last
        # message given as `contents`: the SDK turns each message of `contents` into its own types
        # and back first, about 0.2 ms a message (40 ms of CPU a call at 200 messages), and our
        # messages, plain text, come out of that unchanged. The tools go the same way.
        config = self._config(system)
        extra: dict[str, Any] = {"contents": contents(messages)}
        if tools:
            extra["tools"] = declarations(tools)
        config.http_options = self._types.HttpOptions(extra_body=extra)
        response = await client.aio.models.generate_content(
            model=self.config.name,
            contents=[{"role": "user", "parts": [{"text": "."}]}],  # replaced by the extra body's
            config=config,
        )
        return reply_from(response)

    def _config(self, system: str | None) -> Any:
        body = request_config(self.config, system)
        if isinstance(body.get("thinking_config"), dict):  # the SDK converts nested fields only from its types
            body["thinking_config"] = self._types.ThinkingConfig(**body["thinking_config"])
        return self._types.GenerateContentConfig(**body)

    def classify(self, err: Exception) -> Failure:
        if isinstance(err, self._errors.APIError):
            message = f"{err.status or ''} {err.message or err}".strip()
            headers = getattr(getattr(err, "response", None), "headers", None)
            if "API_KEY_INVALID" in str(err) or "API key not valid" in message:  # Google answers 400
                return Failure("permanent", f"the key was refused: {message}")
            return classify_status(err.code, message, headers)
        return classify_transport(err) or Failure("permanent", f"unexpected {type(err).__name__}: {err}")

    def check(self) -> str:
        info = loop.run(self.client.aio.models.get(model=self.config.name))
        return f"model {info.name} is available"
