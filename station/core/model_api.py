"""The Model protocol: what the engine needs from anything that writes an agent's replies.

The engine calls models through these protocols only; the providers (station/models/, a floor
above) implement them, and the world hands the engine a ModelSource that makes them."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from station.core.registry import Registry

if TYPE_CHECKING:
    from station.core.config import ModelConfig

# {"role": "user" | "assistant", "text": ...}; in a tool session an assistant message may carry
# "tool_calls" and a {"role": "tool", "results": [{"id", "name", "text"}]} message answers them.
Message = dict[str, Any]
# The offline policies of the system roles, by model-name prefix: each makes a Model from its name.
SCRIPTED_POLICIES: Registry[Callable[[str], Model]] = Registry("scripted policy")
LENGTH = "length"  # Reply.finish_reason of a reply cut off by max_output_tokens


@dataclass(frozen=True)
class Tool:
    """A tool a model may call: its name, what it does, and its arguments as a JSON Schema object.

    A call of it is a plain dict, recorded as JSON: {"id", "name", "arguments": dict}; a call whose
    arguments were not a JSON object has "arguments": {} and "error" saying why."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0  # part of input_tokens served from the provider's cache
    reasoning_tokens: int = 0  # thinking: billed as output, never kept in the conversation
    cache_write_tokens: int = 0  # part of input_tokens written to the cache (anthropic)

    @property
    def context_tokens(self) -> int:
        """Size of the conversation after this exchange (what the life-limit on tokens counts)."""
        return self.input_tokens + self.output_tokens

    @property
    def spent(self) -> int:
        return self.input_tokens + self.output_tokens + self.reasoning_tokens


@dataclass
class Reply:
    text: str
    usage: Usage = field(default_factory=Usage)
    thinking: str | None = None
    latency_s: float | None = None  # of the successful request (retries not counted)
    cost_usd: float | None = None  # set by the model pool from the price table
    retries: int = 0
    overflow: str | None = None  # the provider said the conversation is too long (no reply)
    cut_from: int | None = None  # the reply was this many characters long and was cut (see `within`)
    # Why the model stopped: "stop" (it finished), LENGTH (it ran into max_output_tokens and was
    # cut off), or the provider's own word for anything else ("content_filter", "safety", ...).
    finish_reason: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # in call order (see Tool)

    def to_payload(self) -> dict[str, Any]:
        """The recorded input: what the world depends on. Latency and retries are facts of the
        live call, not of the world: they go to the inputs' latency column and the spend table."""
        usage = dict(vars(self.usage))  # asdict's deep copy costs more, and Usage holds only numbers
        payload: dict[str, Any] = {"text": self.text, "thinking": self.thinking, "usage": usage}
        if self.cost_usd is not None:
            payload["cost_usd"] = self.cost_usd
        if self.cut_from is not None:
            payload["cut_from"] = self.cut_from
        if self.finish_reason is not None:
            payload["finish_reason"] = self.finish_reason
        if self.tool_calls:
            payload["tool_calls"] = self.tool_calls
        return payload

    @property
    def cut_tokens(self) -> int | None:
        """Output tokens after which the model was stopped by max_output_tokens (None: not cut)."""
        if self.finish_reason != LENGTH:
            return None
        return self.usage.output_tokens + self.usage.reasoning_tokens

    def within(self, limit: int) -> Reply:
        """The reply with its text and thinking cut to `limit` characters each, before anything is
        stored: a runaway 50 MB answer would otherwise be kept (and shown) in full, several times."""
        if len(self.text) <= limit and len(self.thinking or "") <= limit:
            return self
        return replace(
            self,
            text=self.text[:limit],
            thinking=self.thinking[:limit] if self.thinking else self.thinking,
            cut_from=len(self.text) if len(self.text) > limit else None,
        )

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Reply:
        return cls(
            text=payload.get("text") or "",
            thinking=payload.get("thinking"),
            usage=Usage(**payload.get("usage", {})),
            cost_usd=payload.get("cost_usd"),
            overflow=payload.get("overflow"),
            cut_from=payload.get("cut_from"),
            finish_reason=payload.get("finish_reason"),
            tool_calls=list(payload.get("tool_calls") or []),
        )


TRANSIENT, PERMANENT, OVERFLOW, INTERRUPTED = "transient", "permanent", "context_overflow", "interrupted"


class ModelError(RuntimeError):
    """A provider failure that retrying did not cure.

    kind: `transient` (still failing after every retry), `permanent` (bad key, unknown model,
    bad request: a human must act), `context_overflow` (the conversation no longer fits), or
    `interrupted` (the station was asked to stop while waiting to retry).
    """

    config: ModelConfig | None  # the settings that failed: set (not always) by PooledModel, read with getattr

    def __init__(self, message: str, *, permanent: bool = False, kind: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind or (PERMANENT if permanent else TRANSIENT)

    @property
    def permanent(self) -> bool:
        return self.kind == PERMANENT


class BudgetExceeded(RuntimeError):
    """The next model call could cross a spending cap; the station must pause first."""


class Model(Protocol):
    name: str

    def complete(self, messages: list[Message], *, system: str | None, agent: str) -> Reply:
        """One reply to the conversation `messages` (the last one is the station's prompt)."""

    def count_tokens(self, messages: list[Message], *, system: str | None) -> int:
        """Tokens the conversation takes in this model's context."""


class ToolModel(Model, Protocol):
    """A model that can be offered tools (the providers' models and the pool's; not every offline
    policy: callers pass `tools=` only when they have tools, so those need not take it)."""

    def complete(
        self, messages: list[Message], *, system: str | None, agent: str, tools: list[Tool] | None = None
    ) -> Reply:
        """One reply; with `tools`, it may call them (Reply.tool_calls), and `messages` may hold
        earlier calls and their results (see Message)."""


class PendingReply(Protocol):
    """A call already sent: its reply is taken later (and may raise ModelError then)."""

    future: Future[Reply]

    def reply(self) -> Reply: ...


class AgentModel(ToolModel, Protocol):
    """A model as an agent's turn uses it: with its calls booked, and able to send one ahead."""

    config: ModelConfig

    @property
    def sends_ahead(self) -> bool: ...

    def submit(
        self, messages: list[Message], *, system: str | None, agent: str, tools: list[Tool] | None = None
    ) -> PendingReply: ...


class ModelSource(Protocol):
    """Where the engine gets the model of an agent's config (the providers' ModelPool)."""

    on_wait: Callable[[str], None]

    @property
    def stop(self) -> threading.Event: ...

    @stop.setter
    def stop(self, event: threading.Event) -> None: ...

    def get(self, config: ModelConfig | dict[str, Any]) -> AgentModel: ...

    def width(self, models: Iterable[ModelConfig | dict[str, Any]]) -> int: ...

    def forget(self, config: ModelConfig | dict[str, Any]) -> None: ...

    def close(self) -> None: ...


MESSAGE_OVERHEAD = 4  # tokens a message costs beyond its text (role markers)


def estimate_tokens(text: str) -> int:
    """A provider-free estimate (about four characters a token) for offline models."""
    return (len(text) + 3) // 4


def estimate_conversation(messages: list[Message], system: str | None) -> int:
    return sum(estimate_tokens(message_text(m)) + MESSAGE_OVERHEAD for m in messages) + (
        estimate_tokens(system) if system else 0
    )


def message_text(message: Message) -> str:
    """All a message holds, as text: what it costs in a context (tool calls' arguments and results too)."""
    text = message.get("text") or ""
    if "tool_calls" not in message and "results" not in message:
        return text
    calls = "".join(c.get("name", "") + json.dumps(c.get("arguments", {})) for c in message.get("tool_calls") or ())
    return text + calls + "".join(r.get("text") or "" for r in message.get("results") or ())


def estimate_reply(text: str) -> int:
    """Output tokens of a reply as offline models report them (it joins the conversation)."""
    return estimate_tokens(text) + MESSAGE_OVERHEAD
