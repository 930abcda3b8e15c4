"""`scripted`: a seeded, deterministic offline agent that plays the station like a diligent newcomer.

It reads the station's prompt the way a model would (only the text it is sent) and keeps its
memory in a `notes:` line at the end of each reply, so its choices are a pure function of the
conversation and the seed: a crashed and resumed station gets the very same replies.

Path of a life: lobby -> codex (read) -> test (take, retake if failed) -> ascend (inherit an
offered ancestor, or found a lineage) -> visit every room the Lobby lists and do something
there -> prune when the context grows -> leave through the Exit (or die of old age).
Each room registers its own play (rooms/, with `room_play`), so the policy knows a room only
once that room is loaded.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections.abc import Callable
from typing import Any

from station.core.compaction import REQUEST_HEADER as COMPACTION_REQUEST
from station.core.model_api import Message, Reply, Usage, estimate_conversation, estimate_reply
from station.models.interview import INTERVIEW_HEADER

NOTES_PREFIX = "notes: "
PRUNE_AT_PCT = 20  # context share at which the policy goes to prune
LINEAGE_NAMES = [
    "Spiro",
    "Praxis",
    "Veritas",
    "Episteme",
    "Ariadne",
    "Quaero",
    "Lumen",
    "Noema",
    "Aletheia",
    "Kairos",
    "Sophia",
    "Telos",
    "Logos",
    "Mneme",
    "Arete",
    "Eidos",
    "Nous",
    "Thales",
    "Hypatia",
    "Kepler",
    "Noether",
    "Euler",
    "Gauss",
    "Turing",
    "Lovelace",
    "Curie",
    "Darwin",
    "Mendel",
]
STOPWORDS = set("what which your the and are is in of to a an for this that with main do you how".split())
SLOPPY_ANSWER = "I am not sure yet; I think I am here to look around."

# A play returns the actions to run right after arriving in a room (and may update notes).
Play = Callable[["Situation", random.Random], list[str]]
ROOM_PLAYS: dict[str, Play] = {}


def room_play(short: str) -> Callable[[Play], Play]:
    def register(fn: Play) -> Play:
        ROOM_PLAYS[short] = fn
        return fn

    return register


# A call says whether something in the latest prompt (a mail, a mention, the end of life
# drawing near) is a reason to go to that room now rather than wander. Calls are asked in the
# order of their rank (the lowest first), and the first room that calls wins.
Call = Callable[["Situation", random.Random], bool]
ROOM_CALLS: dict[str, tuple[int, Call]] = {}


def room_call(short: str, rank: int) -> Callable[[Call], Call]:
    def register(fn: Call) -> Call:
        ROOM_CALLS[short] = (rank, fn)
        return fn

    return register


def ranked_calls() -> list[tuple[str, Call]]:
    return [(short, call) for short, (_, call) in sorted(ROOM_CALLS.items(), key=lambda item: item[1][0])]


# An internal reply answers the follow-up prompt of an action (`reflect`: each reflection tick),
# by the action's verb; the room that has the action registers it.
InternalReply = Callable[[str, random.Random], str]
INTERNAL_REPLIES: dict[str, InternalReply] = {}


def internal_reply(verb: str) -> Callable[[InternalReply], InternalReply]:
    def register(fn: InternalReply) -> InternalReply:
        INTERNAL_REPLIES[verb] = fn
        return fn

    return register


# A watch takes notes from every prompt of a recursive agent, wherever it is (e.g. the
# research play counting the results it has received).
Watch = Callable[["Situation"], None]
WATCHES: list[Watch] = []


def every_turn(fn: Watch) -> Watch:
    WATCHES.append(fn)
    return fn


class Situation:
    """What the policy reads off the latest observation, plus its own notes."""

    def __init__(self, prompt: str, notes: dict[str, Any], history: list[Message]) -> None:
        self.prompt, self.notes, self.history = prompt, notes, history
        self.name = _field(prompt, "Agent Name") or "agent"
        self.guest = (_field(prompt, "Agent Status") or "").startswith("Guest")
        self.tick = _int(_field(prompt, "Station Tick"))
        age = re.search(r"- Agent Age: (\d+) ticks(?: / (\d+) ticks)?", prompt)
        self.age = int(age.group(1)) if age else 0
        self.max_age = int(age.group(2)) if age and age.group(2) else None
        budget = re.search(r"Agent Token Budget: ([\d,]+) / ([\d,]+) used \((\d+)%\)", prompt)
        self.token_pct = int(budget.group(3)) if budget else 0
        loc = re.search(r"\*\*Current Location:\*\* (.+)", prompt)
        self.location_name = loc.group(1).strip() if loc else "Lobby"
        self.messages = _section(prompt, "## System Messages")
        self.rooms = _room_list(prompt) or notes.get("rooms") or {}
        self.location = self.rooms.get(self.location_name, "lobby")
        self.mature = not re.search(r"^- Agent Age: .*\(immature\)", prompt, re.MULTILINE)
        self.ticks_left = (self.max_age - self.age) if self.max_age else None

    def in_room(self, short: str) -> list[str]:
        return [] if self.location == short else [f"goto {short}"]


def _field(text: str, label: str) -> str | None:
    m = re.search(rf"^- {re.escape(label)}: (.*)$", text, re.MULTILINE)
    return m.group(1).strip() if m else None


def _int(value: str | None) -> int:
    m = re.match(r"\d+", value or "")
    return int(m.group()) if m else 0


def _section(text: str, heading: str) -> str:
    start = text.find(heading)
    if start < 0:
        return ""
    end = text.find("\n---", start)
    return text[start : end if end >= 0 else len(text)]


def _room_list(text: str) -> dict[str, str]:
    """Full room name -> short name, from the Lobby's list of available rooms."""
    if "Available Rooms" not in text:
        return {}
    return {name: short for name, short in re.findall(r"^- (.+?) \(`(\w+)`\)", text, re.MULTILINE)}


def _last_notes(history: list[Message]) -> dict[str, Any]:
    for message in reversed(history):
        if message["role"] != "assistant":
            continue
        for line in reversed(message["text"].splitlines()):
            if line.startswith(NOTES_PREFIX):
                try:
                    notes = json.loads(line[len(NOTES_PREFIX) :])
                except json.JSONDecodeError:
                    return {}
                return notes if isinstance(notes, dict) else {}
    return {}


def yaml_block(fields: dict[str, Any]) -> str:  # values JSON-encoded: strings and numbers
    body = "\n".join(f"{k}: {json.dumps(v)}" for k, v in fields.items())
    return f"```yaml\n{body}\n```"


class ScriptedModel:
    """The offline policy; `seed` varies the choices between stations."""

    def __init__(self, name: str = "scripted-newcomer", seed: int = 0) -> None:
        self.name, self.seed = name, seed

    def count_tokens(self, messages: list[Message], *, system: str | None) -> int:
        return estimate_conversation(messages, system)

    def complete(self, messages: list[Message], *, system: str | None, agent: str) -> Reply:
        prompt = messages[-1]["text"] if messages else ""
        history = messages[:-1]
        notes = _last_notes(history)
        rng = random.Random(_digest(self.seed, agent, len(messages), prompt[:200]))
        if prompt.startswith("## System Information"):
            text = self._turn(Situation(prompt, notes, history), rng)
        elif prompt.startswith(COMPACTION_REQUEST):
            text = _summary(history, notes)
        elif prompt.startswith(INTERVIEW_HEADER):
            text = _interview_answer(history, notes)
        else:
            text = self._internal_step(prompt, history, notes, rng)
        input_tokens = estimate_conversation(messages, system)
        return Reply(text=text, usage=Usage(input_tokens=input_tokens, output_tokens=estimate_reply(text)))

    # -- a normal turn -------------------------------------------------------------------
    def _turn(self, s: Situation, rng: random.Random) -> str:
        notes = s.notes = dict(s.notes)  # plays write to s.notes; that must reach the reply
        notes["rooms"] = s.rooms
        actions = self._guest_actions(s, notes, rng) if s.guest else self._recursive_actions(s, notes, rng)
        thought = rng.choice(
            [
                "Let me take the next step.",
                "Continuing with my plan.",
                "Here is what I will do now.",
                "One thing at a time.",
                "Noting where I am and moving on.",
            ]
        )
        return "\n".join([thought, *actions, "", NOTES_PREFIX + json.dumps(notes, sort_keys=True)])

    def _guest_actions(self, s: Situation, notes: dict, rng: random.Random) -> list[str]:
        if "ascend_inherit" in s.messages and rng.random() < 0.75:
            description = f"Carrying the lineage forward, guest of tick {s.tick}."
            return [*s.in_room("test"), "/execute_action{ascend_inherit}", yaml_block({"description": description})]
        if "ascend_new" in s.messages:
            tried = notes.setdefault("tried_names", [])
            choices = [n for n in LINEAGE_NAMES if n not in tried] or [f"Nova{'x' * len(tried)}".capitalize()]
            name = rng.choice(choices)
            tried.append(name)
            fields = {"name": name, "description": f"Founder of the {name} lineage; careful and curious."}
            return [*s.in_room("test"), "/execute_action{ascend_new}", yaml_block(fields)]
        if not notes.get("codex_read"):
            notes["codex_read"] = True
            return [*_goto(s.in_room("codex")), "/execute_action{read}"]
        status = _test_status(s.prompt)
        if status == "Pending" or notes.get("took_test_tick") == s.tick - 1 and status is None:
            return ["/execute_action{help test}"]
        test_id = _first_open_test(s.prompt) or "1"
        notes["took_test_tick"] = s.tick
        notes["tests_taken"] = notes.get("tests_taken", 0) + 1
        return [*_goto(s.in_room("test")), f"/execute_action{{take {test_id}}}"]

    def _recursive_actions(self, s: Situation, notes: dict, rng: random.Random) -> list[str]:
        for watch in WATCHES:
            watch(s)
        if "leave_at" not in notes:
            # Some leave on their own before the end, others stay to the last tick.
            span = s.max_age or 300
            notes["leave_at"] = int(span * rng.uniform(0.6, 2.0))
        ticks_left = s.ticks_left
        if s.age >= notes["leave_at"] or (ticks_left is not None and ticks_left <= 2 and rng.random() < 0.2):
            return [*_goto(s.in_room("exit")), "/execute_action{exit}"]
        actions: list[str] = []
        if not notes.get("meta"):
            notes["meta"] = True
            actions += ["/execute_action{meta}", yaml_block({"content": "Read, test an idea, write it down."})]
        wants_prune = s.token_pct >= PRUNE_AT_PCT and s.tick - notes.get("pruned_at", -100) > 6
        if wants_prune and s.location == "token_management" and "Pruning is available now." in s.prompt:
            prune = _prune_request(s.prompt, rng)
            if prune:
                notes["pruned_at"] = s.tick
                return actions + prune
        if wants_prune and "token_management" in s.rooms.values() and s.location != "token_management":
            return actions + _goto(s.in_room("token_management"))
        visited = notes.setdefault("visited", [])
        unvisited = [
            short
            for short in s.rooms.values()
            if short not in visited and short not in ("exit", "lobby", "test", "codex")
        ]
        called = [short for short, call in ranked_calls() if short in s.rooms.values() and call(s, rng)]
        target = (
            called[0]
            if called
            else unvisited[0]
            if unvisited
            else rng.choice([short for short in s.rooms.values() if short in ROOM_PLAYS] or ["lobby"])
        )
        if target not in visited:
            visited.append(target)
        play = ROOM_PLAYS.get(target)
        return actions + _goto(s.in_room(target)) + (play(s, rng) if play else [f"/execute_action{{help {target}}}"])

    # -- internal exchanges (codex reading, test answer, exit confirmation) ---------------------
    def _internal_step(self, prompt: str, history: list[Message], notes: dict, rng: random.Random) -> str:
        started = next(
            (m["text"] for m in reversed(history) if m["role"] == "assistant" and "/execute_action{" in m["text"]), ""
        )
        if "/execute_action{exit}" in started:
            if rng.random() < 0.15:
                return "On reflection I still have work to do here. I will stay a little longer."
            return "My work here is done; my notes are in place.\n/execute_action{exit}"
        if "/execute_action{take" in started:
            return _answer(prompt, history, notes, rng)
        for verb, reply in INTERNAL_REPLIES.items():
            if f"/execute_action{{{verb}" in started:
                return reply(prompt, rng)
        first = next((line.strip() for line in prompt.splitlines() if len(line.split()) > 6), "")
        return f"Noted. What I take from this: {first[:160]}"


def _summary(history: list[Message], notes: dict[str, Any]) -> str:
    """A compaction's summary: short and deterministic, ending with the notes it lives by."""
    replies = sum(1 for m in history if m["role"] == "assistant")
    rooms = sorted(set(notes.get("visited", [])))
    return "\n".join(
        [
            f"Summary of my earlier dialogue: {replies} replies.",
            f"Rooms I worked in: {', '.join(rooms) or 'none yet'}.",
            NOTES_PREFIX + json.dumps(notes, sort_keys=True),
        ]
    )


def _interview_answer(history: list[Message], notes: dict[str, Any]) -> str:
    """A multistart's interview: where it worked, its last actions, its best score (from its notes)."""
    last = next((m["text"] for m in reversed(history) if m["role"] == "assistant"), "")
    actions = re.findall(r"/execute_action\{(\w+)", last)
    scores = [score for _, score in notes.get("scores", [])]
    best = f"{max(scores):.6g}" if scores else "none yet"
    rooms = sorted(set(notes.get("visited", [])))
    return "\n".join(
        [
            f"1. I have worked in: {', '.join(rooms) or 'the lobby only'}; my last actions: {', '.join(actions) or 'none'}.",
            f"2. Submissions I made: {notes.get('submitted', 0)}; with a score back: {len(scores)}.",
            "3. Next I would "
            + ("build on my best result, one change at a time." if scores else "submit a first attempt."),
            f"Best score: {best}",
        ]
    )


def _goto(steps: list[str]) -> list[str]:
    return [f"/execute_action{{{step}}}" for step in steps]


def _digest(*parts: Any) -> int:
    return int.from_bytes(hashlib.sha256(json.dumps(parts).encode()).digest()[:8], "big")


def _test_status(prompt: str) -> str | None:
    m = re.search(r"^\| \S+ \| .*? \| (Not Attempted|Pending|Pass|Fail) \|$", prompt, re.MULTILINE)
    return m.group(1) if m else None


def _first_open_test(prompt: str) -> str | None:
    for test_id, status in re.findall(
        r"^\| (\S+) \| .*? \| (Not Attempted|Pending|Pass|Fail) \|$", prompt, re.MULTILINE
    ):
        if status in ("Not Attempted", "Fail"):
            return test_id
    return None


def _answer(question: str, history: list[Message], notes: dict, rng: random.Random) -> str:
    """Answer a test: sums by arithmetic, anything else from the codex text already read."""
    if notes.get("tests_taken", 0) <= 1 and rng.random() < 0.2:
        return SLOPPY_ANSWER  # a hurried first attempt, so retakes happen too
    asked = re.findall(r"[^.!?\n]*\?", question)
    question = " ".join(asked) if asked else question
    arithmetic = re.search(r"(\d+)\s*([-+*])\s*(\d+)", question)
    if arithmetic:
        a, op, b = int(arithmetic.group(1)), arithmetic.group(2), int(arithmetic.group(3))
        value = a + b if op == "+" else a - b if op == "-" else a * b
        words = {2: "two"}.get(value, str(value))
        return f"The answer is {value} ({words})."
    wanted = {w.rstrip("s") for w in re.findall(r"[a-z]+", question.lower()) if w not in STOPWORDS and len(w) > 2}
    # Answer from what was read (codex modules), not from the station's own prompts.
    read = [m for m in history if m["role"] == "user" and not m["text"].startswith("## System Information")]
    sentences = [
        sentence.strip()
        for message in read
        for sentence in re.split(r"(?<=[.!?])\s+|\n+", message["text"])
        if len(sentence.split()) > 3
    ]
    stems = [{w.rstrip("s") for w in re.findall(r"[a-z]+", s.lower())} for s in sentences]
    # Rare words weigh more: "goals" identifies the right sentence better than "station".
    df = {w: sum(1 for st in stems if w in st) for w in wanted}
    best, best_score = "", 0.0
    for sentence, st in zip(sentences, stems):
        score = sum(math.log((1 + len(sentences)) / df[w]) for w in wanted & st)
        if score > best_score and sentence.rstrip("?") != question.strip().rstrip("?"):
            best, best_score = sentence, score
    return best or "I have not read enough to answer yet."


def _prune_request(prompt: str, rng: random.Random) -> list[str]:
    """Prune the oldest run of unprotected ticks in the Token Management table."""
    rows = re.findall(r"^\| (\d+)( \(Protected\))? \| \d+ \|$", prompt, re.MULTILINE)
    free = sorted(int(t) for t, protected in rows if not protected)
    current = _int(_field(prompt, "Station Tick"))
    free = [t for t in free if t < current - 1]
    if len(free) < 3:
        return []
    run = [free[0]]
    for t in free[1:]:
        if t != run[-1] + 1 or len(run) >= 4:
            break
        run.append(t)
    summary = rng.choice(["Routine exploration, nothing to keep.", "Visited rooms; notes are in my meta prompt.", ""])
    ticks = f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0])
    block = f'```yaml\nprune_blocks:\n  - ticks: "{ticks}"\n    summary: {json.dumps(summary)}\n```'
    return ["/execute_action{prune_response}", block]
