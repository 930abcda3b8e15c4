"""The scripted policy's plays in the Common Room and the Reflection Chamber, and its reflections."""

from __future__ import annotations

import random
import re

from station.models.scripted import Situation, internal_reply, room_call, room_play, yaml_block

# Recursive agent names as they appear in prompts: a lineage word and a Roman generation.
AGENT_NAME = re.compile(r"\b([A-Z][a-z]+ [IVXLCDM]+)\b")
REFLECTION_MARK = re.compile(r"Reflection Tick (\d+) / (\d+)")
META_DUE = re.compile(r"^- Meta-Reflection: (due now|overdue)", re.MULTILINE)  # the status line, when asked

OPENERS = [
    "Hello from {name}. I am still mapping the station and would like to compare notes.",
    "{name} here. What has worked for you so far, and what turned out to be a dead end?",
    "I am {name}; at tick {tick} my plan is to read first and then test one idea carefully.",
    "Has anyone written down what they learned in their first ticks? I would read it gladly. ({name})",
]
REFLECTION_PROMPTS = [
    "What have I learned so far, and which of my habits should I change?",
    "Which question matters most to me right now, and how could I test it?",
    "What would I want my successor to know if my life ended today?",
]
THOUGHTS = [
    "Looking back, I spent my first ticks reading and moving between rooms; it gave me a map, not results.",
    "What surprised me most is how much of the station depends on what others leave behind.",
    "I notice that I act before I have a clear question. A smaller, sharper question would serve me better.",
    "If I had to start again, I would write notes earlier and keep them short.",
    "The most useful thing I can do next is one careful experiment, written up honestly whatever the outcome.",
    "I want to keep my own line of thought even when others seem further ahead.",
]


@room_play("common")
def _play_common(s: Situation, rng: random.Random) -> list[str]:
    if re.search(r"^- Agent Age: .*\(immature\)", s.prompt, re.MULTILINE):
        return []  # the door is still closed; the goto is refused and the agent moves on
    line = rng.choice(OPENERS).format(name=s.name, tick=s.tick)
    actions = ["/execute_action{speak}", yaml_block({"message": line})]
    others = sorted({n for n in AGENT_NAME.findall(s.prompt) if n != s.name})
    if others and rng.random() < 0.4:
        actions += ["/execute_action{invite}", yaml_block({"recipients": rng.choice(others)})]
    return actions


@room_call("reflect", rank=5)
def _meta_reflection_due(s: Situation, rng: random.Random) -> bool:
    return bool(META_DUE.search(s.prompt))  # draws nothing: stations that ask for none play as before


@room_play("reflect")
def _play_reflect(s: Situation, rng: random.Random) -> list[str]:
    if META_DUE.search(s.prompt):
        return ["/execute_action{meta_reflect}"]
    if s.tick - s.notes.get("reflected_at", -100) < 10:
        return []  # one reflection now and then is enough
    s.notes["reflected_at"] = s.tick
    return ["/execute_action{reflect}", yaml_block({"prompt": rng.choice(REFLECTION_PROMPTS), "tick": 3})]


@internal_reply("meta_reflect")
@internal_reply("reflect")
def reflection_reply(prompt: str, rng: random.Random) -> str:
    """A first-person answer to one reflection tick (never an action line)."""
    mark = REFLECTION_MARK.search(prompt)
    k, n = (int(mark.group(1)), int(mark.group(2))) if mark else (1, 1)
    first, second = THOUGHTS[(k - 1) % len(THOUGHTS)], rng.choice(THOUGHTS)
    if k == n:
        return f"{first} To close this reflection: I will act on one concrete step in my next turn."
    return f"{first} {second}" if second != first else first
