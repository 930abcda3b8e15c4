"""`scripted` debugger (model names starting `scripted-debugger`): an offline stand-in for a debugging model.

It fixes one kind of crash for real: a misspelt name or attribute for which Python's own
error says "Did you mean: 'x'?". It replaces the misspelt word in the latest version of the
code (the last proposal, else the submission) and returns the whole file. Anything else it
declines, with no code block, which the station reports as "the debugger could not fix it".
"""

from __future__ import annotations

import re

from station.core.model_api import SCRIPTED_POLICIES, Message, Reply, Usage, estimate_conversation, estimate_reply

CODE = re.compile(r"```python[ \t]*\n(.*?)```", re.DOTALL)
HINT = re.compile(r"(?:name|attribute) '(\w+)'.*?Did you mean: '(\w+)'\?")


@SCRIPTED_POLICIES.register("scripted-debugger")
class ScriptedDebugger:
    def __init__(self, name: str = "scripted-debugger") -> None:
        self.name = name

    def count_tokens(self, messages: list[Message], *, system: str | None) -> int:
        return estimate_conversation(messages, system)

    def complete(self, messages: list[Message], *, system: str | None, agent: str) -> Reply:
        text = self._answer(messages)
        return Reply(
            text=text,
            usage=Usage(input_tokens=estimate_conversation(messages, system), output_tokens=estimate_reply(text)),
        )

    @staticmethod
    def _answer(messages: list[Message]) -> str:
        versions = [found[-1] for m in messages if (found := CODE.findall(m["text"]))]
        hints = HINT.findall(messages[-1]["text"]) if messages else []
        if not versions or not hints:
            return "I cannot tell how to fix this crash without changing the method, so I propose no code."
        wrong, right = hints[-1]
        code, fixed = versions[-1], re.sub(rf"\b{re.escape(wrong)}\b", right, versions[-1])
        if fixed == code:
            return f"The error names '{wrong}', but it does not appear in the code; I propose no change."
        return f"The crash comes from the misspelt name '{wrong}'; Python suggests '{right}'.\n\n```python\n{fixed}```"
