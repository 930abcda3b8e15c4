"""Gemini through the official `google-genai` SDK (the Gemini API, keyed by GEMINI_API_KEY).

Gemini 2.5 and later cache repeated prompt prefixes implicitly; the conversation only grows at
its end, so each turn re-uses the previous one's prefix, and the cached share shows in usage.
"""

from __future__ import annotations

from typing import Any

from ..config import ModelConfig
from .base import LENGTH, Message, ModelError, Reply, Usage
from .remote import Failure, RemoteModel, api_key, classify_status, classify_transport, missing_key_message


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
    return [{"role": "model" if m["role"] == "assistant" else "user", "parts": [{"text": m["text"]}]} for m in messages]


def reply_from(response: Any) -> Reply:
    parts = []
    if response.candidates and response.candidates[0].content and response.candidates[0].content.parts:
        parts = response.candidates[0].content.parts
    text = "".join(p.text for p in parts if p.text and not p.thought)
    thinking = "\n\n".join(p.text for p in parts if p.text and p.thought) or None
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
    )


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
        # No retry_options: the SDK then never retries, and we do (the same way for every provider).
        options: dict[str, Any] = {"timeout": int(config.timeout_s * 1000)}
        if config.base_url:
            options["base_url"] = config.base_url
        self.client = genai.Client(api_key=key, http_options=options)  # type: ignore[arg-type]  # HttpOptionsDict's keys

    def _request(self, messages: list[Message], system: str | None, agent: str) -> Reply:
        response = self.client.models.generate_content(
            model=self.config.name,
            contents=contents(messages),  # type: ignore[arg-type]  # ContentDicts, as plain dicts
            config=self._config(system),
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
        info = self.client.models.get(model=self.config.name)
        return f"model {info.name} is available"
