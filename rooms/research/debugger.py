"""The debugger: a model that receives crashing code and its traceback and proposes a fixed file.

It is a conversation with any `Model`: the first message carries the task, the code and the
error; each later message says how the previous proposal fared. A proposal is the last
```python block of the reply; a reply without one means the debugger gave up. The debugger
runs nothing itself: its proposal is evaluated in the sandbox like any submission.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from typing import Any

from station.models import BudgetExceeded, ModelError

from .pipeline import Trail

CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
TRACEBACK_CHARS = 6000  # the end of a traceback is what matters


def extract_code(text: str) -> str | None:
    blocks = [b for b in CODE_BLOCK.findall(text or "") if b.strip()]
    return blocks[-1] if blocks else None


def failure_text(result: dict[str, Any]) -> str:
    """The error of a run as the debugger reads it: the error line and the end of the traceback/stderr."""
    trace = result.get("traceback") or result.get("stderr") or ""
    if len(trace) > TRACEBACK_CHARS:
        trace = "…\n" + trace[-TRACEBACK_CHARS:]
    return f"{result.get('error') or 'unknown error'}\n\n{trace}".strip()


def conversation(texts: Any, task: Any, so_far: Trail) -> list[dict[str, str]]:
    first = so_far.versions[0]
    messages = [
        {
            "role": "user",
            "text": texts.render(
                "debugger_first",
                task_title=task.title,
                task_spec=task.spec(),
                entry=task.entry,
                code=first.code,
                failure=failure_text(first.result),
            ),
        }
    ]
    for proposal, version in zip(so_far.proposals, so_far.versions[1:]):
        messages.append({"role": "assistant", "text": proposal.get("text") or ""})
        messages.append(
            {
                "role": "user",
                "text": texts.render("debugger_again", version=version.number, failure=failure_text(version.result)),
            }
        )
    return messages


def propose(texts: Any, task: Any, so_far: Trail, get_model: Callable[[], Any]) -> dict[str, Any]:
    """One debugger call as a recorded payload; a provider failure counts as giving up."""
    messages = conversation(texts, task, so_far)
    try:
        model = get_model()
        reply = model.complete(messages, system=texts.render("debugger_system"), agent="debugger")
    except (ModelError, BudgetExceeded) as err:  # the evaluation is reported without a fix
        return {"text": None, "code": None, "model": None, "error": str(err) or type(err).__name__}
    code = extract_code(reply.text)
    previous = so_far.versions[-1].code
    note = None
    if code is not None and code.strip() == previous.strip():
        code, note = None, "the proposal was identical to the code that crashed"
    return {"text": reply.text, "code": code, "model": getattr(model, "name", None), "error": note}


def diff(old: str, new: str, old_name: str = "your code", new_name: str = "fixed version") -> str:
    lines = difflib.unified_diff(old.splitlines(), new.splitlines(), old_name, new_name, lineterm="", n=2)
    return "\n".join(lines)
