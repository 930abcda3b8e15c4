"""Bad input from an agent never harms the world, and the agent is told clearly what went wrong.

Every case drives a real station: a `replay` agent sends the bad reply at some tick, and the
test reads the agent's NEXT prompt (a clear, specific error) and the store (nothing that
should stay put has moved, the turn was recorded once, the database is intact, and the
station keeps running).
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    FILLER,
    act,
    events,
    executed_lines,
    guest,
    integrity_ok,
    make_station,
    prompt_at,
    record_requests,
    recursive,
    replay_model,
    reply,
    section,
    stored,
    turn,
    turn_rows,
    yaml_block,
)

from rooms.misc import MiscRoom
from station.apps.world import Station
from station.core.engine import Engine
from station.core.room import Room

MORE_TICKS = 3  # ticks run after the bad one, to show that the station keeps going
UNCHANGED = ("location", "description", "meta_prompt", "state", "kind", "pruned", "lineage", "generation")


@dataclass
class Case:
    st: Station
    engine: Engine
    name: str
    bad_tick: int
    before: dict[str, Any]  # the stored agent when the bad tick starts
    after: dict[str, Any]  # the stored agent right after the bad turn

    @property
    def next_prompt(self) -> str:
        return prompt_at(self.st, self.bad_tick + 1)

    @property
    def bad_turn(self) -> Any:
        return turn(self.st, self.bad_tick)

    def assert_unchanged(self, *fields: str, but: tuple[str, ...] = ()) -> None:
        for key in fields or UNCHANGED:
            if key not in but:
                assert self.after[key] == self.before[key], f"{key} changed: {self.before[key]!r} -> {self.after[key]!r}"


def run_case(tmp_path: Path, setup: list[str], bad: str, *, kind: str = "guest",
             prepare: Callable[[Station], None] | None = None, **overrides: Any) -> Case:
    """`setup`: one reply per tick before the bad one (ticks 1..n); then the bad reply at tick n+1.

    Runs up to the bad tick plus MORE_TICKS and checks the generic consistency rules: exactly one
    turn row per tick, the agent still active and acting, `PRAGMA integrity_check` ok.
    """
    model = replay_model(tmp_path / "replies.jsonl", [*setup, bad], pad=MORE_TICKS + 8)
    spec = recursive(model) if kind == "recursive" else guest(model)
    st = make_station(tmp_path / "station", [spec], **overrides)
    if prepare is not None:
        prepare(st)
    name = "Spiro I" if kind == "recursive" else "Guest_1"
    engine = Engine(st)
    bad_tick = len(setup) + 1
    engine.run(until_tick=bad_tick - 1)
    before = stored(st, name)
    engine.run(until_tick=bad_tick)
    after = stored(st, name)
    case = Case(st, engine, name, bad_tick, before, after)
    assert case.bad_turn["reply"] == bad[: len(case.bad_turn["reply"])]
    assert engine.run(ticks=MORE_TICKS) == f"finished tick {bad_tick + MORE_TICKS}"
    for tick in range(1, bad_tick + MORE_TICKS + 1):
        assert len(turn_rows(st, session=1, tick=tick)) == 1, f"tick {tick}"
    assert stored(st, name)["state"] == "active"
    assert integrity_ok(st)
    return case


def detected(prompt: str) -> str:
    return section(prompt, "## Actions Detected (Last Turn)")


# -- unknown actions and wrong rooms --------------------------------------------------------
def test_unknown_action_is_named_with_the_rooms_actions(tmp_path: Path) -> None:
    case = run_case(tmp_path, [], reply("Let me try something.", act("dance wildly")))
    assert ("Action 'dance' is not recognized in the Lobby. Actions here: none; everywhere: goto, help, meta, exit."
            in executed_lines(case.next_prompt))
    assert "1. `dance wildly` (in Lobby);" in detected(case.next_prompt)
    case.assert_unchanged()


def test_action_of_another_room_says_where_it_belongs(tmp_path: Path) -> None:
    case = run_case(tmp_path, [], act("take 1"))
    lines = executed_lines(case.next_prompt)
    assert "Action 'take' is not recognized in the Lobby. It is an action of: test." in lines
    case.assert_unchanged()
    assert case.st.store.scalar("SELECT COUNT(*) FROM test_attempts") == 0
    assert case.bad_turn["internal"] == "[]"  # no test exchange started


def test_goto_unknown_room(tmp_path: Path) -> None:
    case = run_case(tmp_path, [], act("goto nowhere"))
    lines = executed_lines(case.next_prompt)
    assert any(line.startswith("Room 'nowhere' not found. Rooms: lobby, codex, reflect") for line in lines), lines
    assert "**Current Location:** Lobby" in case.next_prompt
    case.assert_unchanged()


def test_goto_without_a_room_shows_usage(tmp_path: Path) -> None:
    case = run_case(tmp_path, [], act("goto"))
    assert "Usage: /execute_action{goto <room>}, e.g. goto codex." in executed_lines(case.next_prompt)
    case.assert_unchanged()


def test_help_for_an_unknown_room(tmp_path: Path) -> None:
    case = run_case(tmp_path, [], act("help nowhere"))
    assert any(line.startswith("No help for 'nowhere': unknown room.") for line in executed_lines(case.next_prompt))
    assert section(case.next_prompt, "## System Messages").strip() == "## System Messages\nNone"
    case.assert_unchanged()


class Garden(Room):
    """A maturity-gated room for the test (no built-in room is gated yet)."""

    short, name = "garden", "Garden"
    maturity_gated = True

    def render(self, ctx: Any, agent: Any) -> str:
        return "Flowers everywhere."


def add_garden(st: Station) -> None:
    st.ctx.rooms["garden"] = Garden()


def test_goto_maturity_gated_room_while_immature(tmp_path: Path) -> None:
    case = run_case(tmp_path, [FILLER], act("goto garden"), prepare=add_garden,
                    lifecycle={"maturity_ticks": 50})
    lines = executed_lines(case.next_prompt)
    assert ("The Garden opens to agents aged 50 ticks or more (you are 1). "
            "Keep working on your own ideas meanwhile; do not wait.") in lines
    assert "- Garden (`garden`) (opens at age 50)" in prompt_at(case.st, 1)  # the Lobby says so beforehand
    case.assert_unchanged()
    assert "garden" not in case.after["rooms"]  # never rendered for the agent


def test_goto_gated_room_works_once_mature(tmp_path: Path) -> None:
    """Control for the test above: the same move succeeds for a mature agent."""
    case = run_case(tmp_path, [], act("goto garden"), prepare=add_garden, lifecycle={"maturity_ticks": 0})
    assert "You moved to the Garden." in executed_lines(case.next_prompt)
    assert case.after["location"] == "garden"


def test_guest_in_a_recursive_only_room(tmp_path: Path) -> None:
    bad = reply(act("change_description"), yaml_block("new_description: I am in charge now."))
    case = run_case(tmp_path, [act("goto misc")], bad)
    lines = executed_lines(case.next_prompt)
    assert "The Misc Room is open to recursive agents only. Pass the test in the Test Chamber first." in lines
    assert "Help Message - Misc Room" not in case.next_prompt  # help waits for a visit that is allowed
    case.assert_unchanged()
    assert case.after["description"] == "A new guest agent."
    assert case.after["location"] == "misc"


def test_guest_cannot_use_the_external_counter(tmp_path: Path) -> None:
    bad = reply(act("request_human"), yaml_block("content: Please make me recursive."))
    case = run_case(tmp_path, [act("goto external")], bad)
    assert "The External Counter is open to recursive agents only. Pass the test in the Test Chamber first." \
        in executed_lines(case.next_prompt)
    assert case.st.store.scalar("SELECT COUNT(*) FROM human_requests") == 0
    case.assert_unchanged()


# -- YAML problems --------------------------------------------------------------------------
@pytest.mark.parametrize("body", [
    'new_description: "an unclosed quote',
    "new_description: Fine\n  indented: wrongly",
    "new_description: first line\n- a list item in a mapping",
], ids=["unclosed-quote", "bad-indentation", "list-in-mapping"])
def test_malformed_yaml(tmp_path: Path, body: str) -> None:
    bad = reply(act("change_description"), yaml_block(body))
    case = run_case(tmp_path, [act("goto misc")], bad, kind="recursive")
    lines = executed_lines(case.next_prompt)
    problem = [line for line in lines if line.startswith("'change_description' was not run: its YAML error")]
    assert problem, lines
    assert "Tips: put the ```yaml block on the line right after the action" in problem[0]
    assert "`change_description` (in Misc Room); YAML error" in detected(case.next_prompt)
    case.assert_unchanged()


def test_yaml_that_is_not_a_mapping(tmp_path: Path) -> None:
    bad = reply(act("change_description"), yaml_block("- just\n- a list"))
    case = run_case(tmp_path, [act("goto misc")], bad, kind="recursive")
    assert any("parameters must be a mapping of 'key: value' lines, got a list" in line
               for line in executed_lines(case.next_prompt))
    case.assert_unchanged()


def test_action_needing_yaml_without_any(tmp_path: Path) -> None:
    case = run_case(tmp_path, [act("goto misc")], act("suggest"), kind="recursive")
    assert ("'suggest' was not run: it needs a ```yaml block right below the action with: "
            "suggestion_content." in executed_lines(case.next_prompt))
    assert case.st.store.scalar("SELECT COUNT(*) FROM suggestions") == 0


def test_missing_key(tmp_path: Path) -> None:
    bad = reply(act("suggest"), yaml_block("text: More windows, please."))
    case = run_case(tmp_path, [act("goto misc")], bad, kind="recursive")
    lines = executed_lines(case.next_prompt)
    assert ("'suggest' was not run: YAML problem: key 'suggestion_content' is missing. "
            "Expected: suggestion_content." in lines), lines
    assert "Note: 'suggest' ignored unknown YAML key(s): text (it reads: suggestion_content)." in lines
    assert case.st.store.scalar("SELECT COUNT(*) FROM suggestions") == 0
    case.assert_unchanged()


def test_meta_without_content(tmp_path: Path) -> None:
    bad = reply(act("meta"), yaml_block("contents: typo in the key"))
    case = run_case(tmp_path, [], bad)
    assert ("'meta' needs a ```yaml block with `content:` (empty content clears the meta prompt)."
            in executed_lines(case.next_prompt))
    case.assert_unchanged()


@pytest.mark.parametrize("body,expected", [
    ("prune_blocks: 5", "'prune_blocks': Input should be a valid list"),
    ("prune_blocks: []", "'prune_blocks': List should have at least 1 item"),
    ("prune_blocks:\n  - just a string", "'prune_blocks.0': Input should be a valid dictionary"),
    ("prune_blocks:\n  - summary: no ticks given", "key 'prune_blocks.0.ticks' is missing"),
], ids=["number-not-list", "empty-list", "item-not-mapping", "item-missing-key"])
def test_wrong_type(tmp_path: Path, body: str, expected: str) -> None:
    bad = reply(act("prune_response"), yaml_block(body))
    case = run_case(tmp_path, [act("goto token_management")], bad, kind="recursive")
    lines = executed_lines(case.next_prompt)
    assert any(line.startswith("'prune_response' was not run: YAML problem:") and expected in line for line in lines), lines
    case.assert_unchanged()
    assert "last_prune_tick" not in case.after["rooms"].get("token_management", {})


def test_oversized_description(tmp_path: Path) -> None:
    bad = reply(act("change_description"), yaml_block("new_description: " + "x" * 500))
    case = run_case(tmp_path, [act("goto misc")], bad, kind="recursive")
    assert any("'new_description' is too long (at most 200 characters)" in line
               for line in executed_lines(case.next_prompt))
    case.assert_unchanged()


def test_oversized_meta_prompt_keeps_the_old_one(tmp_path: Path) -> None:
    setup = [reply(act("meta"), yaml_block("content: Keep it short."))]
    bad = reply(act("meta"), yaml_block("content: " + "y" * 2100))
    case = run_case(tmp_path, setup, bad)
    assert ("'meta' was not run: the meta prompt is 2100 characters; at most 2000 are allowed."
            in executed_lines(case.next_prompt))
    assert case.before["meta_prompt"] == case.after["meta_prompt"] == "Keep it short."
    assert "- Agent Meta Prompt:\n```\nKeep it short.\n```" in case.next_prompt
    case.assert_unchanged()


# -- empty, actionless and malformed replies --------------------------------------------------
@pytest.mark.parametrize("text", ["", "  \n\t\n"], ids=["empty", "whitespace"])
def test_empty_reply(tmp_path: Path, text: str) -> None:
    case = run_case(tmp_path, [act("goto codex")], text)
    assert ("Your reply was empty, so no action was taken. You stayed where you were."
            in executed_lines(case.next_prompt))
    assert "No action was received last turn (the reply was empty)." in detected(case.next_prompt)
    case.assert_unchanged()


def test_reply_without_action(tmp_path: Path) -> None:
    case = run_case(tmp_path, [], "I would like to go to the codex, please. goto codex")
    assert any(line.startswith("No action was found in your reply; you stayed where you were.")
               for line in executed_lines(case.next_prompt))
    assert "No action was received last turn." in detected(case.next_prompt)
    case.assert_unchanged()


def test_action_with_empty_braces(tmp_path: Path) -> None:
    case = run_case(tmp_path, [], act(""))
    assert any(line.startswith("Error: Empty action command") for line in executed_lines(case.next_prompt))
    assert "1. `(empty)` (in Lobby);" in detected(case.next_prompt)
    case.assert_unchanged()


def test_more_than_100_actions(tmp_path: Path) -> None:
    bad = "\n".join([act("goto lobby")] * 100 + [act("goto codex")] * 20)
    case = run_case(tmp_path, [], bad)
    lines = executed_lines(case.next_prompt)
    assert "Error: Too many actions in one reply: only the first 100 are run; 20 more were ignored." in lines
    assert lines.count("You are in the Lobby.") == 100
    case.assert_unchanged()  # the ignored `goto codex` never ran
    assert len(json.loads(case.bad_turn["actions"])["parsed"]) == 101


@pytest.mark.parametrize("limit", [None, 5000], ids=["default-limit", "configured-limit"])
def test_one_megabyte_reply_is_cut(tmp_path: Path, limit: int | None) -> None:
    head = act("goto codex") + "\n"
    tail = "\n" + act("goto test") + "\n"
    bad = head + ("lorem ipsum " * 90_000)[: 1_000_000 - len(head) - len(tail)] + tail
    assert len(bad) == 1_000_000
    overrides = {"engine": {"max_reply_chars": limit}} if limit else {}
    case = run_case(tmp_path, [], bad, kind="recursive", **overrides)
    lines = executed_lines(case.next_prompt)
    read = f"{limit or 200_000:,}"
    assert f"Your reply was 1,000,000 characters long; only the first {read} were read and kept." in lines
    assert case.after["location"] == "codex"  # the action before the cut ran, the one after it did not
    case.assert_unchanged(but=("location",))


# -- internal exchanges ---------------------------------------------------------------------
def test_second_internal_action_is_refused_without_side_effect(tmp_path: Path) -> None:
    bad = reply(act("read 1"), act("read 2"))
    case = run_case(tmp_path, [act("goto codex")], bad)
    lines = executed_lines(case.next_prompt)
    assert ("'read' was not run: only one reading, test or other exchange can start per reply, and one already "
            "started. Use it in a later turn.") in lines
    assert case.after["rooms"]["codex"]["read"] == {"1": 2}  # module 2 was not marked as read
    assert "| 2 | The Principles of Inquiry | Not yet read |" in case.next_prompt
    internal = json.loads(case.bad_turn["internal"])
    assert len(internal) == 1 and "Codex module 1 of 1: The Mandate" in internal[0]["prompt"]
    case.assert_unchanged()


def test_unknown_yaml_keys_are_noted_but_the_action_runs(tmp_path: Path) -> None:
    bad = reply(act("change_description"), yaml_block("new_description: Studies clouds.\ncolour: blue"))
    case = run_case(tmp_path, [act("goto misc")], bad, kind="recursive")
    lines = executed_lines(case.next_prompt)
    assert "Note: 'change_description' ignored unknown YAML key(s): colour (it reads: new_description)." in lines
    assert "Your description is now: Studies clouds." in lines
    assert case.after["description"] == "Studies clouds."
    assert "- Agent Description: Studies clouds." in case.next_prompt
    case.assert_unchanged(but=("description",))


# -- a room that crashes ----------------------------------------------------------------------
def test_room_handler_exception_is_undone_and_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_suggest(room: Any, ctx: Any, agent: Any, args: Any, params: Any) -> Any:
        agent.description = "corrupted"
        agent.room_state("misc")["half_done"] = True
        agent.meta_prompt = "corrupted too"
        ctx.store.execute("INSERT INTO suggestions(tick, agent, text) VALUES(?, ?, ?)", (ctx.tick, agent.name, "x"))
        ctx.notify(agent, "a message that must vanish")
        raise RuntimeError("boom in suggest")

    spec = MiscRoom.actions["suggest"]
    monkeypatch.setitem(MiscRoom.actions, "suggest", dataclasses.replace(spec, handler=broken_suggest))
    bad = reply(act("suggest"), yaml_block("suggestion_content: Fix the lights."),
                act("change_description"), yaml_block("new_description: Still works after the crash."))
    case = run_case(tmp_path, [act("goto misc")], bad, kind="recursive")
    st = case.st
    lines = executed_lines(case.next_prompt)
    assert "'suggest' failed inside the station and was undone; the operator was alerted." in lines
    assert "Your description is now: Still works after the crash." in lines  # the next action still ran
    alerts = [e for e in events(st, "operator_alert") if e[1] == "Spiro I"]
    assert len(alerts) == 1 and alerts[0][0] == case.bad_tick
    assert "boom in suggest" in alerts[0][2]["problem"] and "Traceback" in alerts[0][2]["traceback"]
    assert st.store.scalar("SELECT COUNT(*) FROM suggestions") == 0
    assert st.store.scalar("SELECT COUNT(*) FROM messages WHERE text LIKE '%must vanish%'") == 0
    for record in (case.after, stored(st, "Spiro I"), st.ctx.agents.get("Spiro I").__dict__):
        assert record["meta_prompt"] is None
        assert "half_done" not in record["rooms"].get("misc", {})
    assert case.after["description"] == "Still works after the crash."
    case.assert_unchanged(but=("description",))


def test_crashed_action_is_undone_for_other_agents_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = record_requests(monkeypatch)

    def broken_suggest(room: Any, ctx: Any, agent: Any, args: Any, params: Any) -> Any:
        other = ctx.agents.get("Guest_1")
        other.description = "changed by a crashed action"
        ctx.agents.save(other)
        raise RuntimeError("boom")

    spec = MiscRoom.actions["suggest"]
    monkeypatch.setitem(MiscRoom.actions, "suggest", dataclasses.replace(spec, handler=broken_suggest))
    crash = reply(act("suggest"), yaml_block("suggestion_content: hi"))
    spiro = replay_model(tmp_path / "spiro.jsonl", [act("goto misc"), crash], pad=4)
    other = replay_model(tmp_path / "guest.jsonl", [], pad=6, name="replay-guest")
    st = make_station(tmp_path / "source", [recursive(spiro), guest(other)])
    Engine(st).run(until_tick=3)
    assert stored(st, "Guest_1")["description"] == "A new guest agent."
    # The guest acts right after the crash (tick 2): its model must see the committed world.
    shown = [messages[-1]["text"] for agent, messages in sent if agent == "Guest_1"]
    assert not any("changed by a crashed action" in text for text in shown)
    # Replaying the recorded inputs rebuilds the same world.
    copy = Station.create(tmp_path / "replayed", st.config)
    Engine(copy, replay_source=st.store).run(until_tick=3)
    assert stored(copy, "Guest_1")["description"] == "A new guest agent."
