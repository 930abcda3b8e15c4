"""The Model protocol: what the engine needs from anything that writes an agent's replies."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

Message = dict[str, str]  # {"role": "user" | "assistant", "text": ...}


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0

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

    def to_payload(self) -> dict[str, Any]:
        """The recorded input: only what the world depends on (latency is kept beside it)."""
        return {"text": self.text, "thinking": self.thinking, "usage": asdict(self.usage)}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> "Reply":
        return cls(text=payload.get("text") or "", thinking=payload.get("thinking"),
                   usage=Usage(**payload.get("usage", {})))


class ModelError(RuntimeError):
    """A provider failure after retries. `permanent` ones (bad key, unknown model) need a human."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class Model(Protocol):
    name: str

    def complete(self, messages: list[Message], *, system: str | None, agent: str) -> Reply:
        """One reply to the conversation `messages` (the last one is the station's prompt)."""

    def count_tokens(self, messages: list[Message], *, system: str | None) -> int:
        """Tokens the conversation takes in this model's context."""


MESSAGE_OVERHEAD = 4  # tokens a message costs beyond its text (role markers)


def estimate_tokens(text: str) -> int:
    """A provider-free estimate (about four characters a token) for offline models."""
    return (len(text) + 3) // 4


def estimate_conversation(messages: list[Message], system: str | None) -> int:
    return sum(estimate_tokens(m["text"]) + MESSAGE_OVERHEAD for m in messages) + \
        (estimate_tokens(system) if system else 0)


def estimate_reply(text: str) -> int:
    """Output tokens of a reply as offline models report them (it joins the conversation)."""
    return estimate_tokens(text) + MESSAGE_OVERHEAD
