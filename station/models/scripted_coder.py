"""`scripted` coder (model names starting `scripted-coder`): an offline stand-in for a research coder's model.

It decides its next tool calls from the conversation alone, so the same conversation always gets
the same reply. Its play: the instruction (the opening message) carries the program the agent wants
as a ```python block. It writes that program to workspace/solution.py with one slip (a misspelt
`import`, so the first attempt fails whatever the task), submits it, and on the failed attempt reads
the file, writes the mended program and submits again. When the program itself then crashes on a
misspelt name for which Python's error says "Did you mean: 'x'?" (the scripted agents' own slips), it
mends that too, as the scripted debugger does, and submits again. When an attempt reports a score it
finishes with a report quoting it; when a failure has no such cure, or anything else goes wrong, it
finishes saying so. Without a program in the instruction it finishes at once, blocked.

What it reads: an attempt scored when its result has a line starting `Score:` with a number and a
first line without "failed", "error", "crash" or "timed out"; a write went through when its result
starts "wrote " (as SandboxTools says).
"""

from __future__ import annotations

import json
import re
from typing import Any

from station.core.model_api import SCRIPTED_POLICIES, Message, Reply, Tool, Usage, estimate_conversation, estimate_reply

CODE = re.compile(r"```python[ \t]*\n(.*?)```", re.DOTALL)
SCORE = re.compile(r"^\W*score\W*?(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)", re.IGNORECASE | re.MULTILINE)
FAILURE = re.compile(r"\b(fail\w*|error|crash\w*|timed out|timeout)\b", re.IGNORECASE)
SOLUTION = "workspace/solution.py"
SLIP = ("import ", "improt ")  # a misspelt keyword: a syntax error in any program
HINT = re.compile(r"(?:name|attribute) '(\w+)'.*?Did you mean: '(\w+)'\?")


@SCRIPTED_POLICIES.register("scripted-coder")
class ScriptedCoder:
    def __init__(self, name: str = "scripted-coder") -> None:
        self.name = name

    def count_tokens(self, messages: list[Message], *, system: str | None) -> int:
        return estimate_conversation(messages, system)

    def complete(
        self, messages: list[Message], *, system: str | None, agent: str, tools: list[Tool] | None = None
    ) -> Reply:
        text, name, arguments = _next(messages)
        turn = 1 + sum(m.get("role") == "assistant" for m in messages)
        calls = [{"id": f"call-{turn}", "name": name, "arguments": arguments}]
        return Reply(
            text=text,
            usage=Usage(
                input_tokens=estimate_conversation(messages, system),
                output_tokens=estimate_reply(text + json.dumps(arguments)),
            ),
            finish_reason="stop",
            tool_calls=calls,
        )


def _next(messages: list[Message]) -> tuple[str, str, dict[str, Any]]:
    """(the reply's text, the tool to call, its arguments)."""
    found = CODE.findall(messages[0].get("text") or "") if messages else []
    if not found:
        return _finish("blocked", "The instruction holds no program (no ```python block), so I wrote nothing.", False)
    program = found[-1]
    done = _exchanges(messages)
    if not done:
        return "I write the instructed program to my workspace.", "write_file", _write(_slipped(program))
    name, result = done[-1]
    if name == "write_file":
        if not result.startswith("wrote "):
            return _finish("blocked", f"I could not write {SOLUTION}: {_first_line(result)}", False)
        return "I submit the program as an official attempt.", "submit_attempt", {"path": SOLUTION}
    if name == "submit_attempt":
        score = _score(result)
        if score is not None:
            return _finish(
                "done",
                f"The attempt ran the instructed program; the station gave it a score of {score}.",
                True,
                _mends(messages),
            )
        if sum(n == "write_file" for n, _ in done) == 1:
            return "The attempt failed; I look at the file.", "read_file", {"path": SOLUTION}
        mended = _mended(_last_written(messages), result)
        if mended is not None:
            wrong, right, code = mended
            return f"The program misspells `{wrong}`; Python suggests `{right}`. I mend it.", "write_file", _write(code)
        return _finish(
            "blocked", f"The instructed program fails as written: {_first_line(result)}", True, _mends(messages)
        )
    if name == "read_file" and SLIP[1] in result:
        return f"I misspelt `{SLIP[0].strip()}`; I write the mended program.", "write_file", _write(program)
    return _finish("blocked", f"My last tool call did not go as planned: {_first_line(result)}", True, _mends(messages))


def _exchanges(messages: list[Message]) -> list[tuple[str, str]]:
    """(tool name, result text) of every call answered so far, in order."""
    done: list[tuple[str, str]] = []
    for message in messages:
        if message.get("role") == "tool":
            done += [(str(r.get("name")), str(r.get("text") or "")) for r in message.get("results") or ()]
    return done


def _last_written(messages: list[Message]) -> str:
    """The content of the last file written (what the attempts ran)."""
    written = [
        call.get("arguments", {}).get("content", "")
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or ()
        if call.get("name") == "write_file"
    ]
    return str(written[-1]) if written else ""


def _mended(code: str, result: str) -> tuple[str, str, str] | None:
    """(wrong, right, the mended program) when the failure names a misspelt word the code holds."""
    hints = HINT.findall(result)
    if not hints:
        return None
    wrong, right = hints[-1]
    fixed = re.sub(rf"\b{re.escape(wrong)}\b", right, code)
    return (wrong, right, fixed) if fixed != code else None


def _slipped(program: str) -> str:
    at = re.search(rf"^{SLIP[0]}", program, re.MULTILINE)
    if at is None:
        return f"{SLIP[1]}math\n{program}"
    return program[: at.start()] + SLIP[1] + program[at.end() :]


def _write(content: str) -> dict[str, Any]:
    return {"path": SOLUTION, "content": content}


def _score(result: str) -> str | None:
    found = SCORE.search(result)
    first = result.strip().splitlines()[0] if result.strip() else ""
    return found.group(1) if found and not FAILURE.search(first) else None


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "no output")[:300]


MENDED = re.compile(r"misspells `(\w+)`; Python suggests `(\w+)`")


def _mends(messages: list[Message]) -> list[str]:
    """The names this session mended in the agent's program (what its report must own up to)."""
    found = (MENDED.search(m.get("text") or "") for m in messages if m.get("role") == "assistant")
    return [f"`{hit.group(1)}` -> `{hit.group(2)}`" for hit in found if hit]


def _finish(status: str, why: str, wrote: bool, mends: list[str] | None = None) -> tuple[str, str, dict[str, Any]]:
    result = why if status == "done" else f"No score: {why}"
    changed = ", ".join(mends or [])
    details = "The program is the one the instruction gives, written as given" + (
        f", except for misspelt names I mended as Python's errors suggested: {changed}." if changed else "."
    )
    faithful = (
        "Faithful: the method is the instructed one; only the misspelt names differ."
        if changed
        else "Faithful: I changed nothing of the instructed method."
    )
    report = "\n\n".join(
        f"## {heading}\n{body}"
        for heading, body in (
            ("Summary", why),
            ("Final Result", result),
            ("Files Changed", SOLUTION if wrote else "None."),
            ("Implementation Details", details),
            ("Faithfulness and Confidence", faithful),
            ("Major Deviations", f"None beyond the mended names ({changed})." if changed else "None."),
            ("Final Status", f"{status}: {why}"),
        )
    )
    return "I finish with my report.", "finish", {"report": report}
