"""`scripted` grader (model names starting `scripted-grader`): an offline stand-in for a grading model.

It passes an answer that contains one term of every key-term group listed in the grading
prompt, and fails it otherwise. Without key terms, any answer of five words or more passes.
"""

from __future__ import annotations

import re

from station.core.model_api import SCRIPTED_POLICIES, Message, Reply, Usage, estimate_conversation, estimate_reply

KEY_TERMS = re.compile(r"^Key terms[^:]*:(.*)$", re.MULTILINE)
ANSWER = re.compile(r"answer:\s*\n(.*?)(?:\n\s*Decide whether|\Z)", re.DOTALL | re.IGNORECASE)


@SCRIPTED_POLICIES.register("scripted-grader")
class ScriptedGrader:
    def __init__(self, name: str = "scripted-grader") -> None:
        self.name = name

    def count_tokens(self, messages: list[Message], *, system: str | None) -> int:
        return estimate_conversation(messages, system)

    def complete(self, messages: list[Message], *, system: str | None, agent: str) -> Reply:
        prompt = messages[-1]["text"] if messages else ""
        found = ANSWER.search(prompt)
        answer = (found.group(1) if found else "").lower()
        terms = KEY_TERMS.search(prompt)
        if terms:
            groups = [re.findall(r'"([^"]+)"', g) for g in terms.group(1).split(";")]
            missing = [g for g in groups if g and not any(t.lower() in answer for t in g)]
            passed = not missing
            comment = (
                "Names everything the criteria ask for."
                if passed
                else f"Missing: {', '.join(' or '.join(g) for g in missing)}."
            )
        else:
            passed = len(answer.split()) >= 5
            comment = "A complete answer." if passed else "Too short to judge."
        text = f'```yaml\npass: {"true" if passed else "false"}\ncomment: "{comment}"\n```'
        return Reply(
            text=text,
            usage=Usage(input_tokens=estimate_conversation(messages, system), output_tokens=estimate_reply(text)),
        )
