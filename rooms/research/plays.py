"""The scripted policy's play at the Research Counter: read the task, submit, follow the results.

What to submit is each task's own play (`Task.scripted_submission` in evaluators/), so a new
task brings its play with it. A task no play knows (a user's own task folder) gets the fallback,
a random-mutation evolution of the best program on the board (evolve_play.py), so that any task
can be seen at work offline. The policy keeps at most two evaluations open (the room's limit),
counting its submissions and the result messages it has received. Importing this module
registers the play (rooms/research/__init__.py does); it registers after the social rooms'
calls, which keeps the order in which the policy answers calls.
"""

from __future__ import annotations

import random
import re

from evaluators.base import Task, task_classes
from station.models.scripted import Situation, every_turn, room_call, room_play, yaml_block

from .evolve_play import evolve_step

TASK_ROW = re.compile(r"^\| (\d+) \| (.+?) \|$", re.MULTILINE)
RESULT = re.compile(r"\*\*Evaluation #(\d+) ")
SCORED = re.compile(r"\*\*Evaluation #(\d+) has a result\*\*[^\n]*\n+Score: (-?\d+(?:\.\d+)?(?:e-?\d+)?)")
KEEP_SCORES = 6
MAX_OPEN = 2
# the room's view says so, and so does a refused submission of code: the play notes it once seen
CODER_MODE = ("Submissions here are instructions for the research coder", "this station takes instructions, not code")


def _remember_tasks(s: Situation) -> dict[str, str]:
    """Task id -> title, from the Research Tasks table of the room's view (when it is in the prompt)."""
    tasks = s.notes.setdefault("tasks", {})
    start = s.prompt.rfind("**Research Tasks**")
    if start >= 0:
        lines = s.prompt[start:].split("\n")[2:]
        table = "\n".join(line for line in lines[: lines.index("") if "" in lines else len(lines)])
        tasks.update({number: title.strip() for number, title in TASK_ROW.findall(table)})
    return tasks


@every_turn
def remember_results(s: Situation) -> None:
    """Note the result messages of this turn, wherever the agent is: which evaluations answered, and
    the scores of the successful ones (the last few, which its papers cite)."""
    seen = s.notes.setdefault("results_seen", [])
    seen.extend(n for n in dict.fromkeys(RESULT.findall(s.messages)) if n not in seen)
    scores = s.notes.setdefault("scores", [])
    for number, score in SCORED.findall(s.messages):
        if all(n != int(number) for n, _ in scores):
            scores.append([int(number), float(score)])
    del scores[:-KEEP_SCORES]


def _open_count(s: Situation) -> int:
    """Own evaluations without a result message yet (each submission gets exactly one)."""
    return max(0, s.notes.get("submitted", 0) - len(s.notes.get("results_seen", [])))


@room_call("research", rank=50)
def _call_research(s: Situation, rng: random.Random) -> bool:
    if s.guest:
        return False
    # Research is one pursuit among several: the other rooms get their visits between experiments.
    return s.tick >= s.notes.get("next_research_tick", 0) and rng.random() < 0.7


@room_play("research")
def _play_research(s: Situation, rng: random.Random) -> list[str]:
    tasks = _remember_tasks(s)
    if not s.notes.get("task_read"):
        s.notes["task_read"] = True
        return ["/execute_action{read 1}"]
    if not tasks:
        return ["/execute_action{help research}"]
    s.notes["next_research_tick"] = s.tick + rng.randint(3, 6)
    if any(sign in s.prompt for sign in CODER_MODE):
        s.notes["coder_mode"] = True
    coder = bool(s.notes.get("coder_mode"))
    if _open_count(s) >= (1 if coder else MAX_OPEN):
        s.notes["next_research_tick"] = s.tick + 1
        return ["/execute_action{rank score}"] if rng.random() < 0.3 else []
    number = max(tasks, key=int)
    known = _known_task(tasks[number])
    actions: list[str] = []
    if known is not None:
        submission = known.scripted_submission(tasks[number], s, rng)
    else:
        actions, submission = evolve_step(number, s, rng)
    if submission is None:
        if actions:  # it asked for what it needs to submit (a program's code, a board): back for it next turn
            s.notes["next_research_tick"] = s.tick + 1
        return actions or [f"/execute_action{{read {number}}}"]
    s.notes["submitted"] = s.notes.get("submitted", 0) + 1
    return [
        *actions,
        f"/execute_action{{submit {number}}}",
        yaml_block(as_instruction(submission) if coder else submission),
    ]


def as_instruction(submission: dict[str, str]) -> dict[str, str]:
    """A coder-mode submission: the program the play would have submitted, as the instruction's one
    ```python block (the scripted coder implements exactly that)."""
    fields = {k: v for k, v in submission.items() if k != "content"}
    fields["instruction"] = (
        "Implement this program as it stands and run it as the official attempt; report its score.\n\n"
        f"```python\n{submission['content'].rstrip()}\n```"
    )
    return fields


def _known_task(title: str) -> type[Task] | None:
    """The task class whose play knows the task shown as `title`: of the classes that have a play
    of their own, the one whose declared title it starts with (the longest such title), or None."""
    known = [cls for cls in task_classes() if cls.title and title.startswith(cls.title) and _has_play(cls)]
    return max(known, key=lambda cls: len(cls.title)) if known else None


def _has_play(cls: type[Task]) -> bool:
    return any("scripted_submission" in vars(klass) for klass in cls.__mro__ if klass is not Task)
