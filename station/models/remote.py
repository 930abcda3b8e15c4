"""What the three provider adapters share: keys, retries with backoff, error kinds, wire text.

An adapter only turns (messages, system) into one request with its SDK and the answer into a
`Reply`; everything about failing well lives here, so the three behave the same way:

* rate limits, overload, 5xx, timeouts, dropped connections and malformed answers are
  retried with exponential backoff and full jitter, honouring `retry-after`;
* a rate limit or overload holds back every call to the same endpoint, not only the one that
  met it, and at most `max_in_flight` calls to an endpoint are sent at once (endpoint.py);
* an empty reply is retried too, and accepted after the last retry (at once if max_output_tokens
  cut it: thinking used every token, and asking again would end the same way);
* a context-too-long answer is never retried (the engine ends the session), and its error names
  the server's limit, the request's tokens and the configured context_limit;
* anything else (bad key, unknown model, bad request) is permanent: the station pauses.
"""

from __future__ import annotations

import email.utils
import functools
import hashlib
import json
import os
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from station.core.config import ModelConfig
from station.core.model_api import (
    INTERRUPTED,
    LENGTH,
    OVERFLOW,
    PERMANENT,
    TRANSIENT,
    Message,
    ModelError,
    Reply,
    Tool,
    estimate_conversation,
)
from station.models import loop
from station.models.endpoint import EndpointKey, Stopped, endpoint_for

if TYPE_CHECKING:
    from station.models.request_processes import RequestProcesses

DEFAULT_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY", "gemini": "GEMINI_API_KEY"}
LONGEST_RETRY_AFTER_S = 15 * 60  # a server asking for longer is treated as asking for this
EMPTY_TEXT = "(empty reply)"  # what an empty turn looks like on the wire: providers refuse empty text
EMPTY_RESULT = "(no output)"  # ... and an empty tool result

OVERFLOW_PATTERN = re.compile(
    r"prompt is too long|context[_ ]length|maximum context|context window|too many (input )?tokens|"
    r"input token count|exceeds the maximum number of tokens|reduce the length|context size|exceed_context",
    re.I,
)
# How servers put numbers in a context-too-long answer: (pattern, group of the limit, group of the request).
CONTEXT_NUMBERS = [
    (
        re.compile(r"maximum context length is (\d+) tokens.*?(?:resulted in|requested) (\d+) tokens", re.I | re.S),
        1,
        2,
    ),  # OpenAI, vLLM, llama-cpp-python
    (re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum", re.I), 2, 1),  # Anthropic
    (
        re.compile(r"input token count \((\d+)\) exceeds the maximum number of tokens allowed \((\d+)\)", re.I),
        2,
        1,
    ),  # Gemini
    (re.compile(r"request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)", re.I), 2, 1),
]
CONTEXT_FIELDS = (re.compile(r"\bn_ctx\W{1,4}(\d+)"), re.compile(r"\bn_prompt_tokens\W{1,4}(\d+)"))  # llama.cpp
RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529}
THROTTLE_STATUS = {429, 503, 529}  # rate limited, overloaded: the whole endpoint should slow down


@dataclass
class Failure:
    kind: str
    message: str
    retry_after: float | None = None
    throttled: bool = False  # the server asked every caller to wait, not only this request


def endpoint_key(config: ModelConfig) -> EndpointKey:
    """What a provider counts its limits against: where the calls go, and with which key (known
    by a digest, so that no key sits in a name that might be logged)."""
    key = api_key(config)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16] if key else ""
    return EndpointKey(config.provider, (config.base_url or "").rstrip("/"), digest)


def api_key(config: ModelConfig) -> str | None:
    """The key from the environment (never from the config), or None for keyless local servers."""
    env = config.api_key_env or DEFAULT_KEY_ENV[config.provider]
    key = os.environ.get(env)
    if not key and config.provider == "gemini" and not config.api_key_env:
        key = os.environ.get("GOOGLE_API_KEY")
    return key or None


@functools.cache
def ssl_context() -> Any:
    """One TLS context for every HTTP pool: each would otherwise load the trust store again."""
    import httpx2  # the HTTP library of all three SDKs

    return httpx2.create_ssl_context()


def pool_limits(connections: int) -> Any:
    """An HTTP pool that keeps every connection it opens: one per slot that uses it."""
    import httpx2

    return httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)


def missing_key_message(config: ModelConfig) -> str:
    env = config.api_key_env or DEFAULT_KEY_ENV[config.provider]
    extra = " (or GOOGLE_API_KEY)" if config.provider == "gemini" and not config.api_key_env else ""
    return f"no API key for {config.provider} model {config.name}: set {env}{extra} in the environment"


def wire_messages(messages: list[Message]) -> list[Message]:
    """The conversation as providers accept it: no empty text anywhere (a message of tool calls
    needs none; a tool result needs some)."""
    # (a message of text alone, as every agent's is, is checked inline: this runs for every message of every call)
    return [m if len(m) == 2 and (m.get("text") or "").strip() else _wire_message(m) for m in messages]


def _wire_message(message: Message) -> Message:
    if "results" in message:
        return {**message, "results": [_filled(r, EMPTY_RESULT) for r in message["results"]]}
    return message if message.get("tool_calls") else _filled(message, EMPTY_TEXT)


def _filled(part: dict[str, Any], placeholder: str) -> dict[str, Any]:
    return part if (part.get("text") or "").strip() else {**part, "text": placeholder}


def tool_call(number: int, call_id: str | None, name: str, arguments: Any) -> dict[str, Any]:
    """Call `number` (from 1) of a reply as it is recorded (see model_api.Tool): the id the provider
    gave, or `call-<number>`; arguments that are not a JSON object become {} with the reason."""
    call: dict[str, Any] = {"id": call_id or f"call-{number}", "name": name, "arguments": {}}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError as err:
            call["error"] = f"the arguments are not valid JSON ({short(str(err), 120)})"
            return call
    if isinstance(arguments, dict):
        call["arguments"] = arguments
    else:
        call["error"] = f"the arguments are a JSON {type(arguments).__name__}, not an object"
    return call


def retry_after(headers: Any) -> float | None:
    """Seconds a server asked us to wait (`retry-after-ms`, `retry-after` as seconds or a date)."""
    if not headers:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000)
        value = headers.get("retry-after")
    except (TypeError, ValueError, AttributeError):
        return None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def classify_status(status: int | None, message: str, headers: Any = None) -> Failure:
    """The kind of an HTTP error answer, the same rule for every provider."""
    wait = retry_after(headers)
    if status in (400, 413, 422) and OVERFLOW_PATTERN.search(message):
        return Failure(OVERFLOW, message)
    if status is None or status in RETRYABLE_STATUS or status >= 500:
        return Failure(TRANSIENT, message, wait, throttled=status in THROTTLE_STATUS or wait is not None)
    if status in (401, 403):
        return Failure(PERMANENT, f"the key was refused ({status}): {message}")
    if status == 404:
        return Failure(PERMANENT, f"not found ({status}; is the model name right?): {message}")
    return Failure(PERMANENT, f"the request was refused ({status}): {message}")


def context_numbers(message: str) -> tuple[int | None, int | None]:
    """(the server's context limit, the request's tokens) as a context-too-long answer gives them."""
    for pattern, limit, request in CONTEXT_NUMBERS:
        found = pattern.search(message)
        if found:
            return int(found.group(limit)), int(found.group(request))
    ctx, prompt = (pattern.search(message) for pattern in CONTEXT_FIELDS)
    return (int(ctx.group(1)) if ctx else None), (int(prompt.group(1)) if prompt else None)


def overflow_message(message: str, context_limit: int | None) -> str:
    """A context-too-long answer, with the numbers an operator needs to fix the config."""
    limit, used = context_numbers(message)
    facts = []
    if limit is not None:
        facts.append(f"the server's limit is {limit:,} tokens")
    if used is not None:
        facts.append(f"this request had {used:,}")
    facts.append(f"context_limit in the config is {context_limit:,}" if context_limit else "context_limit is not set")
    advice = ""
    if limit is not None and (context_limit is None or context_limit > limit):
        advice = f"; set context_limit to {limit} or less, so agents are warned before it is reached"
    return f"the conversation no longer fits the model's context ({', '.join(facts)}{advice}): {message}"


def short(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "…"


class RemoteModel:
    """Base of the provider adapters. Subclasses implement `_http_pool`, `_sdk_client`,
    `_request`, `classify` and `check`."""

    provider = "remote"

    def __init__(
        self,
        config: ModelConfig,
        *,
        stop: threading.Event | None = None,
        on_wait: Callable[[str], None] | None = None,
        processes: RequestProcesses | None = None,
    ) -> None:
        self.config, self.name = config, config.name
        self.processes = processes  # None: requests are sent from this process
        self.stop = stop or threading.Event()
        self.on_wait = on_wait or (lambda text: None)
        self._jitter = random.Random()
        self.endpoint = endpoint_for(endpoint_key(config), config.max_in_flight)

    _sdk: Any  # the provider's SDK module, imported by the subclass when a model is made

    # -- what subclasses provide ----------------------------------------------------------
    def _http_pool(self, connections: int) -> Any:
        """An async HTTP client of the SDK's kind that keeps up to `connections` connections open
        (the httpx client that the Anthropic and OpenAI SDKs, set in `self._sdk`, both offer)."""
        return self._sdk.DefaultAsyncHttpxClient(limits=pool_limits(connections), verify=ssl_context())

    def _sdk_client(self, pool: Any) -> Any:
        """The SDK's async client for this model's settings, sending over `pool`."""
        raise NotImplementedError

    async def _request(
        self, client: Any, messages: list[Message], system: str | None, agent: str, tools: list[Tool] | None
    ) -> Reply:
        """One request, run on the process's request loop (loop.py)."""
        raise NotImplementedError

    def classify(self, err: Exception) -> Failure:
        raise NotImplementedError

    def check(self) -> str:
        """A cheap call that proves key, endpoint and model work (for `station doctor`)."""
        raise NotImplementedError

    def _client(self, slot: int) -> Any:
        # Clients differ by the settings they are made with: the key (the endpoint's), the timeout.
        return self.endpoint.client(slot, self.config.timeout_s, self._http_pool, self._sdk_client)

    @property
    def client(self) -> Any:
        """A client for one-off calls outside the bound (`station doctor`'s checks), to be
        awaited on the request loop: `loop.run(...)`."""
        return self._client(0)

    # -- the Model protocol ---------------------------------------------------------------
    def count_tokens(self, messages: list[Message], *, system: str | None) -> int:
        # An estimate; the engine scales it by what the provider reported for the last call.
        return estimate_conversation(messages, system)

    def complete(
        self, messages: list[Message], *, system: str | None, agent: str, tools: list[Tool] | None = None
    ) -> Reply:
        if self.processes is not None:  # made whole, retries too, in a request process
            return self.processes.call(self.config, messages, system, agent, tools)
        retries = self.config.max_retries
        sent = wire_messages(messages)
        for attempt in range(retries + 1):
            try:
                with self.endpoint.slot(self.stop) as slot:
                    began = time.monotonic()
                    reply = loop.run(self._request(self._client(slot), sent, system, agent, tools))
            except Stopped:
                raise ModelError(
                    f"{self.provider} {self.name}: stopped while waiting to send (the endpoint was busy or "
                    "asked to wait)",
                    kind=INTERRUPTED,
                ) from None
            except Exception as err:  # noqa: BLE001 - every SDK failure is classified below
                failure = self.classify(err)
                if failure.kind == OVERFLOW:
                    raise ModelError(
                        f"{self.provider} {self.name}: {overflow_message(failure.message, self.config.context_limit)}",
                        kind=OVERFLOW,
                    ) from err
                if failure.kind != TRANSIENT:
                    raise ModelError(f"{self.provider} {self.name}: {failure.message}", kind=failure.kind) from err
                if attempt == retries:
                    raise ModelError(
                        f"{self.provider} {self.name}: still failing after {retries} retries: {failure.message}",
                        kind=TRANSIENT,
                    ) from err
                self._wait(attempt, failure, agent)
                continue
            empty = not reply.text.strip() and not reply.tool_calls  # calls alone are an answer
            if empty and reply.finish_reason != LENGTH and attempt < retries:
                # (one cut at max_output_tokens, all thinking, would come back the same: kept, and told)
                self._wait(attempt, Failure(TRANSIENT, "empty reply"), agent)
                continue
            reply.latency_s = round(time.monotonic() - began, 3)
            reply.retries = attempt
            return reply
        raise AssertionError("unreachable")

    def _wait(self, attempt: int, failure: Failure, agent: str) -> None:
        cfg = self.config
        backoff = min(cfg.retry_max_s, cfg.retry_base_s * 2**attempt)
        delay = self._jitter.uniform(backoff / 2, backoff)  # jitter spreads agents hit at once
        if failure.retry_after is not None:
            delay = max(delay, min(failure.retry_after, LONGEST_RETRY_AFTER_S))
        if failure.throttled:  # the other calls to this endpoint wait as long
            self.endpoint.hold_off(delay)
        self.on_wait(
            f"{agent}: {self.provider} {self.name} {short(failure.message, 80)}; "
            f"retry {attempt + 1}/{cfg.max_retries} in {delay:.1f} s"
        )
        if self.stop.wait(delay):
            raise ModelError(
                f"{self.provider} {self.name}: stopped while waiting to retry ({failure.message})", kind=INTERRUPTED
            )


def classify_transport(err: Exception) -> Failure | None:
    """Failures below HTTP (timeouts, refused or dropped connections, unreadable bodies)."""
    name = type(err).__name__
    if isinstance(err, (TimeoutError, ConnectionError)) or "Timeout" in name:
        return Failure(TRANSIENT, f"no answer in time ({name})")
    if any(word in name for word in ("Connect", "Protocol", "ReadError", "NetworkError", "Closed")):
        return Failure(TRANSIENT, f"the connection failed ({name}: {short(str(err), 120)})")
    if isinstance(err, (json.JSONDecodeError, UnicodeDecodeError)) or "Validation" in name or "Decod" in name:
        return Failure(TRANSIENT, f"the answer could not be read ({name})")
    return None
