"""`replay`: replies read in order from a JSONL file (one {"text": ...} object per line; a line
may also hold "tool_calls", as a tool-using worker's reply records them).

For re-executing a whole station's recorded inputs use `station replay`, which reads the
source station's input log directly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from station.core.model_api import Message, ModelError, Reply, Tool, Usage, estimate_conversation, estimate_reply


class ReplayModel:
    def __init__(self, name: str, path: str) -> None:
        self.name = name
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as err:
            raise ModelError(f"replay file {path}: {err.strerror}", permanent=True) from None
        self.replies: list[tuple[str, list[dict[str, Any]]]] = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                found = json.loads(line)
                calls = found.get("tool_calls") or []
                if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
                    raise TypeError
                self.replies.append((str(found["text"]), calls))
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
                raise ModelError(
                    f'replay file {path}, line {number}: expected {{"text": ..., "tool_calls": [{{...}}]}} '
                    "(tool_calls optional)",
                    permanent=True,
                ) from None

    def count_tokens(self, messages: list[Message], *, system: str | None) -> int:
        return estimate_conversation(messages, system)

    def complete(
        self, messages: list[Message], *, system: str | None, agent: str, tools: list[Tool] | None = None
    ) -> Reply:
        # The n-th reply of a conversation is line n, so a resumed station continues where it
        # stopped (each agent walks the file from the start; pruning shifts the count).
        i = sum(1 for m in messages if m["role"] == "assistant")
        if i >= len(self.replies):
            raise ModelError(f"replay file exhausted for {agent} after {i} replies", permanent=True)
        text, calls = self.replies[i]
        return Reply(
            text=text,
            usage=Usage(input_tokens=estimate_conversation(messages, system), output_tokens=estimate_reply(text)),
            tool_calls=calls,
        )
