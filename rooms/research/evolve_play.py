"""The scripted researcher's play on a task no built-in play knows (a user's own task folder): a
random-mutation evolution, so that any task can be seen working offline before a real model is paid.

It plays as a model would, from what the station shows it and nothing else:

- the leaderboard in the Research Counter's view, sorted by score (`rank score`, once), names the
  best evaluation of the task (a watch notes it, and the scores of the agent's own results, on
  every turn, wherever the agent is);
- `review <id>` sends that evaluation's full record, its code included, to the agent's System
  Messages next turn; the code is read back from the conversation when the agent next submits
  (its own evaluations' code it has already: its reply submitted it);
- the parent is the best program the agent can see: the board's best once it is mature, its own
  lineage's best (or the System baseline) while immature, since that is all its board shows (as
  it last saw it: arriving from another room, it acts on what it noted). While the best's code has
  not come, it waits for it rather than mutating something worse; only when
  nothing is scored yet, or the best's code cannot be had, is the parent the program it built on
  last, else the program in the task statement (an OpenEvolve folder shows its initial program
  there), else a System baseline from the board, reviewed;
- the parent is mutated (mutation.py), and the child submitted with an abstract that names its
  parent and why it was chosen. What scores better tops the board and becomes the next parent;
  what scores worse is left. A child identical to a program already submitted (its own, or one
  whose record it read) is never sent, so a noisy evaluator's second score of the same code is
  not taken for progress.

Its memory is the policy's notes (`evolve`): the task, the best seen (id, score, author, and whether
the board it was read from showed every lineage), the parent of the last child, the review asked for
and how often, and evaluations whose code could not be had.
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
# The code field of a submission's yaml block (JSON-encoded, as station.models.scripted.yaml_block writes it)
CONTENT = re.compile(r'^content: (".*")$', re.MULTILINE)
REVIEW_TRIES = 2  # asks for one evaluation's code before giving up on it (refused, or pruned each time)
SKIP_KEPT = 10
CHILD_TRIES = 3  # mutations drawn before giving up on finding one the agent has not submitted yet


def evolve_step(task: str, s: Situation, rng: random.Random) -> tuple[list[str], dict[str, str] | None]:
    """The actions of one visit to the Research Counter for `task` (its id), and the submission
    to make, if any: a mutation of the best program it can see, once the conversation holds its code."""
    ev = s.notes.setdefault("evolve", {})
    if ev.get("task") != task:
        ev["task"] = task
        _note_best(ev, s)  # the first visit: what this prompt shows was not noted yet
    actions = [] if ev.get("ranked") else ["/execute_action{rank score}"]
    ev["ranked"] = True
    texts = _conversation(s)
    best = ev.get("best")
    best_code = _known_code(s, texts, best[0]) if best else None
    if best and best_code is None:
        actions += _ask_for(ev, best[0])
        if ev.get("best") == best:  # still worth having: its code arrives next turn, build on it then
            return actions, None
    if best and best_code is not None:
        ev.pop("asked", None)  # got it
        parent: tuple[int | None, Any, str, str] | None = (best[0], best[1], best_code, _why_best(best))
    else:
        parent = _fallback(ev, s, task, texts)
    if parent is None:
        if ev.get("baseline") is not None and not any(a.startswith("/execute_action{review") for a in actions):
            actions += _ask_for(ev, ev["baseline"])
        if _statement(texts, task) is None:
            actions.append(f"/execute_action{{read {task}}}")
        return actions, None
    number, score, code, why = parent
    child = _untried_child(code, s, texts, rng)
    if child is None:
        return actions, None
    ev["parent"] = [number, score] if number is not None else None
    scored = f" (score {score})" if isinstance(score, float) else ""
    source = f"evaluation #{number}{scored}" if number is not None else "the program in the task statement"
    return actions, {
        "title": f"Mutation of #{number}" if number is not None else "Mutation of the task's program",
        "tags": "evolution, mutation",
        "abstract": f"A random mutation of {source}, {why}, keeping what scores better: {'; '.join(child.edits)}.",
        "content": child.code,
    }


def _why_best(best: list[Any]) -> str:
    """Why the best is the parent, as the board it was read from showed it: every lineage's work
    when the agent was mature, only its own lineage's and the System's before."""
    author, seen_all = (best[2], best[3]) if len(best) > 3 else ("", True)  # notes of an older play: 2 items
    if seen_all:
        return "the best on the board"
    return "the System's baseline, as my lineage has nothing better yet" if author == "System" else "my lineage's best"


def _untried_child(code: str, s: Situation, texts: list[str], rng: random.Random) -> Mutation | None:
    """A mutation of `code` that is no program already submitted: not one of the agent's own (its
    replies hold what it submitted, JSON-encoded in the yaml block, as a model's do), nor one whose
    record it was sent (identical code scored again is no progress, only the evaluator's noise)."""
    sent = [m["text"] for m in s.history if m["role"] == "assistant"]
    for _ in range(CHILD_TRIES):
        child = mutate(code, rng)
        if child is None:
            return None
        if not any(json.dumps(child.code) in text for text in sent) and not _is_a_record(child.code, texts):
            return child
    return None


def _is_a_record(code: str, texts: list[str]) -> bool:
    """Whether a review record in the conversation holds exactly `code`."""
    body = code.removesuffix("\n")
    return any(body in text and any(m.group(2) == body for m in RECORD_CODE.finditer(text)) for text in texts)


def _fallback(ev: dict[str, Any], s: Situation, task: str, texts: list[str]) -> tuple[int | None, Any, str, str] | None:
    """A parent when the best's code cannot be had, or nothing is scored yet: the last parent (whose
    code the conversation still holds), else the program the task statement shows, else a reviewed
    System baseline; with the reason it was chosen."""
    last = ev.get("parent")
    if last:
        code = _known_code(s, texts, last[0])
        if code is not None:
            return last[0], last[1], code, "the program I built on last (the best's code could not be had)"
    shown = _statement(texts, task)
    code = _first_block(shown) if shown is not None else None
    if code is not None:
        return None, None, code, "as nothing better is scored yet"
    baseline = ev.get("baseline")
    code = _record_code(texts, baseline) if baseline is not None else None
    return (baseline, None, code, "a System baseline, as nothing is scored yet") if code is not None else None


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
    if isinstance(ev, dict) and "task" in ev:
        _note_best(ev, s)


def _note_best(ev: dict[str, Any], s: Situation) -> None:
    """The best scored evaluation of the task in this prompt's board(s) and results, if better than
    the one noted; an unscored System row is noted as the program to start from. A board ranked by
    score that lists a lower score above a higher one ranks by more than the score (a task's sort
    key, as a reference-format evaluator may give): from then on its top row is the best, and the
    bare scores of results are not compared."""
    skip = set(ev.get("skip", []))
    boards = _boards(s.prompt, ev["task"])
    for rows, ranked in boards:
        scored = [(n, a, v) for n, a, v in rows if v is not None and n not in skip]
        if ranked and any(lower[2] < higher[2] for lower, higher in zip(scored, scored[1:])):
            ev["by_rank"] = True
        if ranked and scored and ev.get("by_rank"):
            ev["best"] = [scored[0][0], scored[0][2], scored[0][1], s.mature]
    found = [row for rows, _ in boards for row in rows]
    if not ev.get("by_rank"):
        found += _own_results(s.messages, ev["task"])
    for number, author, score in found:
        if number in skip:
            continue
        if score is None:
            if author == "System" and ev.get("baseline") is None:
                ev["baseline"] = number  # a program to start from when nothing is scored yet
            continue
        best = ev.get("best")
        if not ev.get("by_rank") and (best is None or score > best[1]):
            ev["best"] = [number, score, author, s.mature]


def _boards(prompt: str, task: str) -> list[tuple[list[tuple[int, str, float | None]], bool]]:
    """Each leaderboard the prompt shows: (id, author, score or None) of the task's rows, in the board's
    order, and whether the board is ranked by score. The board's scores are higher-is-better for every
    task whose ranking is the score's. Rows still running are left out."""
    boards = []
    for start in (m.start() for m in re.finditer(re.escape(BOARD), prompt)):
        lines = prompt[start:].split("\n")[2:]
        header = [c.strip() for c in CELL_BAR.split(lines[0])[1:-1]] if lines else []
        if "Score" not in header or "ID" not in header or "Task" not in header:
            continue
        where = {name: header.index(name) for name in ("ID", "Task", "Author", "Score")}
        rows, end = [], len(lines)
        for index, line in enumerate(lines[2:], 2):
            cells = [c.strip() for c in CELL_BAR.split(line)[1:-1]]
            if not line.startswith("|") or len(cells) != len(header):
                end = index
                break
            if cells[where["Task"]] != task or not cells[where["ID"]].isdigit() or cells[where["Score"]] == "running":
                continue
            score = cells[where["Score"]]
            value = float(score) if NUMBER.fullmatch(score) else None
            rows.append((int(cells[where["ID"]]), cells[where["Author"]], value))
        below = "\n".join(lines[end : end + 3]).lower()  # "Sorted by: score." or "(sorted by: score)"
        boards.append((rows, "sorted by: score" in below))
    return boards


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


def _known_code(s: Situation, texts: list[str], number: int) -> str | None:
    """The code of evaluation #number, if the conversation holds it: a review record of it (the version
    that was scored, the debugger's if it mended it), else the agent's own submission (its reply, which
    the room's next message acknowledged as that evaluation)."""
    return _record_code(texts, number) or _own_code(s, number)


def _own_code(s: Situation, number: int) -> str | None:
    """What the agent submitted as evaluation #number: a model remembers what it wrote, no review needed."""
    acknowledged = f" as evaluation #{number};"
    sent = [*s.history, {"role": "user", "text": s.prompt}]
    for reply, answer in zip(sent, sent[1:]):
        if reply["role"] == "assistant" and answer["role"] == "user" and acknowledged in answer["text"]:
            found = CONTENT.search(reply["text"])
            return json.loads(found.group(1)) if found else None
    return None


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
