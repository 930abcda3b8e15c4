"""The scripted researcher's play on a task no built-in play knows (a user's own task folder): a
random-mutation evolution, so that any task can be seen working offline before a real model is paid.

It plays as a model would, from what the station shows it and nothing else:

- the leaderboard in the Research Counter's view, sorted by score (`rank score`, once), names the
  best evaluation of the task (a watch notes it, and the scores of the agent's own results, on
  every turn, wherever the agent is);
- `review <id>` sends that evaluation's full record, its code included, to the agent's System
  Messages next turn; the code is read back from the conversation when the agent next submits;
- while the best's code has not come (or nothing is scored yet), the parent is the program it
  built on last, else the program in the task statement (an OpenEvolve folder shows its initial
  program there), else a System baseline from the board, reviewed;
- the parent is mutated (mutation.py), and the child submitted with an abstract that names its
  parent. What scores better tops the board and becomes the next parent; what scores worse is left.

Its memory is the policy's notes (`evolve`): the task, the best (id, score) seen, the parent of the
last child, the review asked for and how often, and evaluations whose code could not be had.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from station.models.scripted import Situation, every_turn

from .mutation import Mutation, mutate

BOARD = "**Submitted Evaluations**"
HEADLINE = re.compile(r'^\*\*Evaluation #(\d+) has a result\*\*: "[^\n]*" \(Research Task #(\d+):', re.MULTILINE)
SCORE_LINE = re.compile(r"^Score: (-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)$", re.MULTILINE)
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
CELL_BAR = re.compile(r"(?<!\\)\|")  # the board escapes a bar inside a cell as \|
# A review record's code: "Code:" (or "Code (version 2, written by the debugger):"), then a fence
# longer than any run of backticks in the code itself (rooms/research/text.py `fence`).
RECORD_CODE = re.compile(r"^Code(?: \([^)\n]*\))?:\n(`{3,})python\n(.*?)\n\1$", re.MULTILINE | re.DOTALL)
PYTHON_BLOCK = re.compile(r"^(`{3,})(?:python|py)\n(.*?)\n\1$", re.MULTILINE | re.DOTALL)
MESSAGE_END = re.compile(r"^### Message \d+$|^---$", re.MULTILINE)
REVIEW_TRIES = 2  # asks for one evaluation's code before giving up on it (refused, or pruned each time)
SKIP_KEPT = 10
CHILD_TRIES = 3  # mutations drawn before giving up on finding one the agent has not submitted yet


def evolve_step(task: str, s: Situation, rng: random.Random) -> tuple[list[str], dict[str, str] | None]:
    """The actions of one visit to the Research Counter for `task` (its id), and the submission
    to make, if any: a mutation of the best program whose code the conversation holds."""
    ev = s.notes.setdefault("evolve", {})
    ev["task"] = task
    actions = [] if ev.get("ranked") else ["/execute_action{rank score}"]
    ev["ranked"] = True
    texts = _conversation(s)
    best = ev.get("best")
    best_code = _record_code(texts, best[0]) if best else None
    if best and best_code is None:
        actions += _ask_for(ev, best[0])  # its code arrives next turn; meanwhile build on what is known
    parent = (best[0], best[1], best_code) if best and best_code else _fallback(ev, task, texts)
    if parent is None:
        if ev.get("baseline") is not None and not any(a.startswith("/execute_action{review") for a in actions):
            actions += _ask_for(ev, ev["baseline"])
        if _statement(texts, task) is None:
            actions.append(f"/execute_action{{read {task}}}")
        return actions, None
    number, score, code = parent
    if number is not None and number == (best or [None])[0]:
        ev.pop("asked", None)  # got it
    child = _untried_child(code, s, rng)
    if child is None:
        return actions, None
    ev["parent"] = [number, score] if number is not None else None
    scored = f" (score {score})" if isinstance(score, float) else ""
    source = f"evaluation #{number}{scored}" if number is not None else "the program in the task statement"
    return actions, {
        "title": f"Mutation of #{number}" if number is not None else "Mutation of the task's program",
        "tags": "evolution, mutation",
        "abstract": f"A random mutation of {source}, keeping what scores better: {'; '.join(child.edits)}.",
        "content": child.code,
    }


def _untried_child(code: str, s: Situation, rng: random.Random) -> Mutation | None:
    """A mutation of `code` the agent has not submitted before: its own replies, which hold what it
    submitted (JSON-encoded in the yaml block), are in the conversation, as they are in a model's."""
    sent = [m["text"] for m in s.history if m["role"] == "assistant"]
    for _ in range(CHILD_TRIES):
        child = mutate(code, rng)
        if child is None or not any(json.dumps(child.code) in text for text in sent):
            return child
    return None


def _fallback(ev: dict[str, Any], task: str, texts: list[str]) -> tuple[int | None, Any, str] | None:
    """A parent while the best's code is not at hand: the last parent (whose code the conversation
    still holds), else the program the task statement shows, else a reviewed System baseline."""
    last = ev.get("parent")
    if last:
        code = _record_code(texts, last[0])
        if code is not None:
            return last[0], last[1], code
    shown = _statement(texts, task)
    code = _first_block(shown) if shown is not None else None
    if code is not None:
        return None, None, code
    baseline = ev.get("baseline")
    code = _record_code(texts, baseline) if baseline is not None else None
    return (baseline, None, code) if code is not None else None


def _ask_for(ev: dict[str, Any], number: int) -> list[str]:
    """`review <number>`, unless it was asked for REVIEW_TRIES times without its code coming back
    (another lineage's work in a station that closes reviews, say): then it is passed over."""
    asked = ev.get("asked") or [number, 0]
    if asked[0] != number:
        asked = [number, 0]
    if asked[1] >= REVIEW_TRIES:
        ev["skip"] = [*ev.get("skip", []), number][-SKIP_KEPT:]
        ev.pop("asked", None)
        if (ev.get("best") or [None])[0] == number:
            ev.pop("best")
        if ev.get("baseline") == number:
            ev.pop("baseline")
        return []
    ev["asked"] = [number, asked[1] + 1]
    return [f"/execute_action{{review {number}}}"]


@every_turn
def note_scores(s: Situation) -> None:
    """Note, from every prompt of an agent playing this play, the best scored evaluation of its task:
    the leaderboard when the prompt shows it, and the results of its own evaluations."""
    ev = s.notes.get("evolve")
    if not isinstance(ev, dict) or "task" not in ev:
        return
    skip = set(ev.get("skip", []))
    found = [*_board_rows(s.prompt, ev["task"]), *_own_results(s.messages, ev["task"])]
    for number, author, score in found:
        if number in skip:
            continue
        if score is None:
            if author == "System" and ev.get("baseline") is None:
                ev["baseline"] = number  # a program to start from when nothing is scored yet
            continue
        best = ev.get("best")
        if best is None or score > best[1]:
            ev["best"] = [number, score]


def _board_rows(prompt: str, task: str) -> list[tuple[int, str, float | None]]:
    """(id, author, score or None) of the task's rows in the leaderboard(s) the prompt shows; the
    board's scores are higher-is-better for every task. Rows still running are left out."""
    rows = []
    for start in (m.start() for m in re.finditer(re.escape(BOARD), prompt)):
        lines = prompt[start:].split("\n")[2:]
        header = [c.strip() for c in CELL_BAR.split(lines[0])[1:-1]] if lines else []
        if "Score" not in header or "ID" not in header or "Task" not in header:
            continue
        where = {name: header.index(name) for name in ("ID", "Task", "Author", "Score")}
        for line in lines[2:]:
            cells = [c.strip() for c in CELL_BAR.split(line)[1:-1]]
            if not line.startswith("|") or len(cells) != len(header):
                break
            if cells[where["Task"]] != task or not cells[where["ID"]].isdigit() or cells[where["Score"]] == "running":
                continue
            score = cells[where["Score"]]
            value = float(score) if NUMBER.fullmatch(score) else None
            rows.append((int(cells[where["ID"]]), cells[where["Author"]], value))
    return rows


def _own_results(messages: str, task: str) -> list[tuple[int, str, float | None]]:
    """(id, "", score) of the agent's results for the task in this turn's System Messages."""
    found: list[tuple[int, str, float | None]] = []
    for head in HEADLINE.finditer(messages):
        if head.group(2) != task:
            continue
        end = MESSAGE_END.search(messages, head.end())
        score = SCORE_LINE.search(messages, head.end(), end.start() if end else len(messages))
        if score:
            found.append((int(head.group(1)), "", float(score.group(1))))
    return found


def _conversation(s: Situation) -> list[str]:
    """What the agent has been sent, the latest first (the station's texts; not its own replies)."""
    return [s.prompt, *(m["text"] for m in reversed(s.history) if m["role"] == "user")]


def _record_code(texts: list[str], number: int) -> str | None:
    """The code of evaluation #number from the latest review record of it the conversation holds."""
    heading = re.compile(rf"^\*\*Evaluation #{number}: .*\*\*$", re.MULTILINE)
    for text in texts:
        for head in reversed(list(heading.finditer(text))):
            code = RECORD_CODE.search(text, head.end())
            if code and "**Evaluation #" not in text[head.end() : code.start()]:
                return code.group(2) + "\n"
    return None


def _statement(texts: list[str], task: str) -> str | None:
    """The latest task statement of `task` (what `read <task>` sent), up to the end of its message."""
    marker = f"**Research Task #{task}: "
    for text in texts:
        start = text.rfind(marker)
        if start >= 0:
            end = MESSAGE_END.search(text, start)
            return text[start : end.start() if end else len(text)]
    return None


def _first_block(text: str) -> str | None:
    found = PYTHON_BLOCK.search(text)
    return found.group(2) + "\n" if found else None
