"""The Common Room and the Reflection Chamber, driven through real stations.

Replay agents say exactly what each test needs; the tests read prompts, turn records and
the rooms' tables back from the station's database.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    act,
    executed_lines,
    guest,
    make_old,
    make_station,
    prompt_at,
    record_requests,
    recursive,
    replay_model,
    reply,
    section,
    stored,
    turn,
    yaml_block,
)

from station.apps.report import status
from station.apps.world import Station
from station.core.engine import Engine

SPEAK = act("speak")


def station(tmp_path: Path, scripts: dict[str, list[str]], *, guests: list[list[str]] = (),
            **overrides: Any) -> Station:
    """Recursive agents named after their lineage ("Spiro" -> "Spiro I"), in the given turn order,
    then guests; everyone is mature unless the test says otherwise."""
    specs = [recursive(replay_model(tmp_path / f"{lineage}.jsonl", replies, pad=40), lineage=lineage)
             for lineage, replies in scripts.items()]
    specs += [guest(replay_model(tmp_path / f"guest{i}.jsonl", replies, pad=40)) for i, replies in enumerate(guests)]
    overrides.setdefault("lifecycle", {"maturity_ticks": 0})
    return make_station(tmp_path / "s", specs, **overrides)


def session_of(st: Station, name: str) -> int:
    return stored(st, name)["session"]


def prompt_of(st: Station, name: str, tick: int) -> str:
    return prompt_at(st, tick, session_of(st, name))


def lines_of(st: Station, name: str, tick: int) -> list[str]:
    """The action results the agent reads in its prompt at `tick` (i.e. of its turn at tick - 1)."""
    return executed_lines(prompt_of(st, name, tick))


def speak(text: str) -> str:
    return reply(SPEAK, yaml_block("message: " + json.dumps(text)))


def messages(st: Station) -> list[tuple[int, str, str]]:
    return [(r["tick"], r["author"], r["content"])
            for r in st.store.all("SELECT tick, author, content FROM common_messages ORDER BY id")]


def inbox(st: Station, name: str, kind: str) -> list[str]:
    return [r["text"] for r in st.store.all("SELECT text FROM messages WHERE agent=? AND kind=?", (name, kind))]


# -- speak ------------------------------------------------------------------------------------------
def test_speak_stores_the_message_and_echoes_its_start(tmp_path: Path) -> None:
    long = "I found that a greedy start followed by local search beats random starts by far."
    st = station(tmp_path, {"Spiro": [reply(act("goto common"), speak("Hello, all.")), speak(long)]})
    Engine(st).run(ticks=3)
    assert messages(st) == [(1, "Spiro I", "Hello, all."), (2, "Spiro I", long)]
    assert 'You said: "Hello, all."' in lines_of(st, "Spiro I", 2)
    assert f'You said: "{long[:50]}..."' in lines_of(st, "Spiro I", 3)
    assert st.store.scalar("SELECT COUNT(*) FROM events WHERE kind='common_message'") == 2


@pytest.mark.parametrize("value,expected", [
    ('"   "', "the message is empty"),
    (json.dumps("x" * 5001), "'message' is too long (at most 5000 characters)"),
    ("123", "'message': Input should be a valid string"),
    ("[a, b]", "'message': Input should be a valid string"),
])
def test_speak_refuses_bad_messages(tmp_path: Path, value: str, expected: str) -> None:
    st = station(tmp_path, {"Spiro": [reply(act("goto common"), SPEAK, yaml_block(f"message: {value}"))]})
    Engine(st).run(ticks=2)
    assert messages(st) == []
    [line] = [x for x in lines_of(st, "Spiro I", 2) if x.startswith("'speak' was not run")]
    assert expected in line


def test_speak_without_yaml_is_explained(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro": [reply(act("goto common"), SPEAK)]})
    Engine(st).run(ticks=2)
    assert "'speak' was not run: it needs a ```yaml block right below the action with: message." \
        in lines_of(st, "Spiro I", 2)


# -- what a visitor sees ----------------------------------------------------------------------------
def test_presence_lists_the_agents_in_the_room_and_says_what_it_means(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro": [act("goto common")], "Curie": [act("goto common")],
                            "Darwin": [act("goto codex")]})
    Engine(st).run(ticks=2)
    output = section(prompt_of(st, "Darwin I", 2), "## Current State")
    assert "Agents currently present" not in output  # Darwin is in the Codex Room
    spiro = prompt_of(st, "Spiro I", 2)
    assert "**Agents currently present:** Curie I, Spiro I" in spiro
    assert "whoever looks in within 5 ticks reads what was said, present or not" in spiro
    assert "Nothing new was said here in the last 5 ticks." in spiro


def test_empty_room_says_nobody_is_present(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro": []})
    room = st.ctx.room("common")
    assert room is not None
    assert "**Agents currently present:** nobody" in room.render(st.ctx, st.ctx.agents.get("Spiro I"))


def test_display_window_reaches_absent_visitors_but_not_older_talk(tmp_path: Path) -> None:
    # Spiro speaks at tick 1. Curie first looks in at tick 6 (1 >= 6 - 5): shown.
    # Darwin first looks in at tick 7 (1 < 7 - 5): not shown.
    filler = [""] * 4
    st = station(tmp_path, {"Spiro": [reply(act("goto common"), speak("Anyone here?"))],
                            "Curie": [*filler, act("goto common")],
                            "Darwin": [*filler, "", act("goto common")]})
    Engine(st).run(ticks=7)
    assert "[Tick 1] Spiro I:\nAnyone here?" in prompt_of(st, "Curie I", 6)
    darwin = prompt_of(st, "Darwin I", 7)
    assert "Anyone here?" not in darwin
    assert "Nothing new was said here in the last 5 ticks." in darwin


def test_each_message_is_shown_once(tmp_path: Path) -> None:
    # Spiro acts first in each tick, so Curie's prompt at tick 2 already has Spiro's tick-2 words.
    st = station(tmp_path, {"Spiro": [act("goto common"), speak("First words.")],
                            "Curie": [act("goto common")]})
    Engine(st).run(ticks=4)
    assert "[Tick 2] Spiro I:\nFirst words." in prompt_of(st, "Curie I", 2)
    assert "First words." not in prompt_of(st, "Curie I", 3)
    assert "Nothing new was said here" in prompt_of(st, "Curie I", 3)
    assert "[Tick 2] Spiro I:" not in prompt_of(st, "Spiro I", 3)  # the speaker has read their own words
    assert st.store.all("SELECT reader, tick FROM common_reads WHERE reader='Curie I'")[0]["tick"] == 2


def test_a_rerender_in_the_same_tick_shows_the_message_again_but_not_next_tick(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro": [], "Curie": []})
    ctx, room = st.ctx, st.ctx.room("common")
    curie = ctx.agents.get("Curie I")
    with st.store.transaction():
        room.post(ctx, "Spiro I", "Said once.")
        assert "Said once." in room.render(ctx, curie)
        assert "Said once." in room.render(ctx, curie)  # same tick: shown again
        st.store.set_meta("tick", ctx.tick + 1)
        assert "Said once." not in room.render(ctx, curie)


def test_separators_stand_only_between_messages(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro": [], "Curie": []})
    ctx, room = st.ctx, st.ctx.room("common")
    with st.store.transaction():
        for text in ("one", "two", "three"):
            room.post(ctx, "Spiro I", text)
        shown = room.render(ctx, ctx.agents.get("Curie I"))
    talk = shown[shown.index("**Recent messages unread by you"):]
    body = talk.split("\n", 1)[1]
    assert body == "[Tick 1] Spiro I:\none\n\n---\n\n[Tick 1] Spiro I:\ntwo\n\n---\n\n[Tick 1] Spiro I:\nthree"
    with st.store.transaction():
        st.store.set_meta("tick", 2)
        room.post(ctx, "Spiro I", "alone")
        single = room.render(ctx, ctx.agents.get("Curie I"))
    assert single.endswith("**Recent messages unread by you (last 5 ticks):**\n[Tick 2] Spiro I:\nalone")


def test_operators_post_under_any_name_and_status_counts_messages(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro": [act("goto common")]})
    with st.store.transaction():
        st.ctx.room("common").post(st.ctx, "Station Operator", "Welcome, everyone.")
        with pytest.raises(ValueError):
            st.ctx.room("common").post(st.ctx, "Station Operator", "  ")
    Engine(st).run(ticks=2)
    assert "[Tick 1] Station Operator:\nWelcome, everyone." in prompt_of(st, "Spiro I", 2)
    assert status(st, running=False)["counts"]["common_room_messages"] == 1


# -- who may enter ----------------------------------------------------------------------------------
def test_guests_see_one_refusal_and_every_action_is_refused(tmp_path: Path) -> None:
    st = station(tmp_path, {}, guests=[[reply(act("goto common"), speak("hi"), act("history"))]])
    Engine(st).run(ticks=2)
    prompt = prompt_of(st, "Guest_1", 2)
    assert "The Common Room is open to recursive agents only." in prompt
    assert "Agents currently present" not in prompt and "Help Message - Common Room" not in prompt
    refusal = "The Common Room is open to recursive agents only. Pass the test in the Test Chamber first."
    assert lines_of(st, "Guest_1", 2) == ["You moved to the Common Room.", refusal, refusal]  # speak, history
    assert messages(st) == []


def test_immature_agents_cannot_enter(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro": [reply(act("goto common"), speak("hi"))]}, lifecycle={"maturity_ticks": 50})
    Engine(st).run(ticks=2)
    assert stored(st, "Spiro I")["location"] == "lobby"
    lines = lines_of(st, "Spiro I", 2)
    assert lines[0].startswith("The Common Room opens to agents aged 50 ticks or more (you are 0)")
    assert messages(st) == []


# -- invite -----------------------------------------------------------------------------------------
def test_invite_sends_one_notice_per_valid_invitee_and_explains_each_refusal(tmp_path: Path) -> None:
    names = "Curie I, curie i, Spiro I, Nobody, Guest_1, Darwin I, Mendel I"
    st = station(tmp_path, {"Spiro": [reply(act("goto common"), act("invite"), yaml_block(f"recipients: {names}"))],
                            "Curie": [], "Darwin": [], "Mendel": []},
                 guests=[[]], lifecycle={"maturity_ticks": 50})
    make_old(st, "Spiro I", "Curie I", "Mendel I")
    with st.store.transaction():  # Mendel I has left the station
        mendel = st.ctx.agents.get("Mendel I")
        mendel.state = "ended"
        st.ctx.agents.save(mendel)
    Engine(st).run(ticks=2)
    lines = lines_of(st, "Spiro I", 2)
    assert lines[lines.index("You moved to the Common Room.") + 1:] == [
        "Invitations sent: 1.",
        "You cannot invite yourself.",
        "'Nobody' is not an active agent of this station.",
        "Guest_1 is a guest; the Common Room is for recursive agents only.",
        "Darwin I is not mature yet and cannot enter the Common Room.",
        "'Mendel I' is not an active agent of this station.",
    ]
    [notice] = inbox(st, "Curie I", "common_invite")  # "curie i" named the same agent
    assert notice.startswith("Spiro I would like you to join them in the Common Room.")
    assert "/execute_action{goto common}" in notice
    # Curie acts after Spiro in tick 1, so the notice is already in Curie's first prompt.
    assert "Spiro I would like you to join them" in section(prompt_of(st, "Curie I", 1), "## System Messages")
    for other in ("Spiro I", "Darwin I", "Guest_1", "Mendel I"):
        assert inbox(st, other, "common_invite") == []


@pytest.mark.parametrize("value,expected", [
    ("{a: 1}", "'recipients' must be a list of agent names or one comma-separated string"),
    ('" , "', "'recipients' names nobody"),
    (json.dumps([f"Agent{i} I" for i in range(21)]), "at most 20 can be invited at once"),
])
def test_invite_refuses_bad_recipient_lists(tmp_path: Path, value: str, expected: str) -> None:
    st = station(tmp_path, {"Spiro": [reply(act("goto common"), act("invite"), yaml_block(f"recipients: {value}")),
                                      ""], "Curie": []})
    Engine(st).run(ticks=2)
    [line] = [x for x in lines_of(st, "Spiro I", 2) if x.startswith("No invitation was sent")]
    assert expected in line
    assert st.store.scalar("SELECT COUNT(*) FROM messages WHERE kind='common_invite'") == 0


def test_invite_accepts_a_yaml_list(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro": [reply(act("goto common"), act("invite"),
                                            yaml_block("recipients:\n  - Curie I\n  - Darwin I"))],
                            "Curie": [], "Darwin": []})
    Engine(st).run(ticks=2)
    assert "Invitations sent: 2." in lines_of(st, "Spiro I", 2)
    assert len(inbox(st, "Curie I", "common_invite")) == len(inbox(st, "Darwin I", "common_invite")) == 1


# -- archiving and history --------------------------------------------------------------------------
ARCHIVE = {"common_room": {"archive_after_ticks": 3, "batch_ticks": 2, "display_ticks": 10}}


def test_old_talk_is_archived_by_period_and_never_shown_again(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro": [reply(act("goto common"), speak("m1")), speak("m2"), speak("m3")],
                            "Curie": ["", "", "", "", act("goto common")]}, **ARCHIVE)
    engine = Engine(st)

    def periods() -> list[tuple[str, Any, Any]]:
        return [(r["content"], r["period_start"], r["period_end"])
                for r in st.store.all("SELECT content, period_start, period_end FROM common_messages ORDER BY id")]

    engine.run(until_tick=3)  # at the end of tick t, talk from before tick t + 1 - 3 leaves
    assert periods() == [("m1", None, None), ("m2", None, None), ("m3", None, None)]
    engine.run(until_tick=4)
    assert periods() == [("m1", 1, 2), ("m2", None, None), ("m3", None, None)]
    engine.run(until_tick=6)
    assert periods() == [("m1", 1, 2), ("m2", 1, 2), ("m3", 3, 4)]
    # Curie looks in at tick 6: m3 is archived at its end, so m1 and m2 (archived) are not shown.
    shown = prompt_of(st, "Curie I", 6)
    assert "[Tick 3] Spiro I:\nm3" in shown and "m1" not in shown and "m2" not in shown
    assert st.store.scalar("SELECT COUNT(*) FROM common_messages") == 3  # nothing is deleted


def test_history_lists_periods_and_reads_spans_back(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro": [reply(act("goto common"), speak("m1")), speak("m2"), speak("m3"),
                                      act("history"), "", "",
                                      reply(act("history"), act("history 1-2"), act("history 1-3"),
                                            act("history 3-1"), act("history soon"), act("history 0"),
                                            act("history 9"), act("history 3"))]}, **ARCHIVE)
    Engine(st).run(ticks=8)
    assert "Nothing is archived yet (talk is archived once it is 3 ticks old). Read a span with " \
           "`history <tick>` or `history <first>-<last>`." in lines_of(st, "Spiro I", 5)
    lines = lines_of(st, "Spiro I", 8)
    assert lines == [
        "Archived periods: 1-2 (2 messages), 3-4 (1 message). Read a span with `history <tick>` or "
        "`history <first>-<last>`.",
        "2 message(s) from ticks 1-2 will appear in your System Messages next turn.",
        "A span of at most 2 ticks can be read at once; 1-3 covers 3.",
        "'3-1' is not a valid span: ticks start at 1 and the first comes first.",
        "Usage: `history <tick>` or `history <first>-<last>` (e.g. history 21-40); 'soon' is neither.",
        "'0' is not a valid span: ticks start at 1 and the first comes first.",
        "Nothing was said in the Common Room during ticks 9-9.",
        "1 message(s) from ticks 3-3 will appear in your System Messages next turn.",
    ]
    inbox_now = section(prompt_of(st, "Spiro I", 8), "## System Messages")
    assert "Common Room talk, ticks 1-2:\n\n[Tick 1] Spiro I:\nm1\n\n---\n\n[Tick 2] Spiro I:\nm2" in inbox_now
    assert "Common Room talk, ticks 3-3:\n\n[Tick 3] Spiro I:\nm3" in inbox_now


def test_history_is_bounded_and_says_where_to_read_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rooms.common
    monkeypatch.setattr(rooms.common, "HISTORY_MAX_MESSAGES", 2)
    st = station(tmp_path, {"Spiro": [reply(act("goto common"), speak("m1")), speak("m2"), speak("m3"),
                                      act("history 1-4")]}, common_room={"batch_ticks": 5})
    Engine(st).run(ticks=5)
    assert "2 message(s) from ticks 1-4 will appear in your System Messages next turn." in lines_of(st, "Spiro I", 5)
    text = inbox(st, "Spiro I", "common_history")[0]
    assert "m1" in text and "m2" in text and "m3" not in text
    assert text.endswith("(1 more message(s) of this span are not shown. Ask for `history 3-4` to read on.)")


# -- the Reflection Chamber -------------------------------------------------------------------------
REFLECT = act("reflect")


def reflect(*yaml_lines: str) -> str:
    return reply(act("goto reflect"), REFLECT, *([yaml_block("\n".join(yaml_lines))] if yaml_lines else []))


def thoughts(n: int) -> list[str]:
    return [f"Thought number {i}." for i in range(1, n + 1)]


def steps(st: Station, tick: int = 1) -> list[dict[str, str]]:
    return json.loads(turn(st, tick)["internal"])


def test_reflect_runs_the_default_number_of_rounds_in_the_same_turn(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    sent = record_requests(monkeypatch)
    st = station(tmp_path, {"Spiro": [reflect(), *thoughts(5), act("goto lobby")]})
    Engine(st).run(ticks=2)
    done = steps(st)
    assert len(done) == 5 and [s["reply"] for s in done] == thoughts(5)
    assert len([1 for _, messages in sent if messages[-1]["text"].startswith("## System Information")]) == 2
    assert len(sent) == 7  # tick 1: the turn plus 5 rounds; tick 2: one turn
    first = done[0]["prompt"]
    assert first.startswith("You have set time aside to think") and first.endswith("Reflection Tick 1 / 5")
    assert [s["prompt"] for s in done[1:4]] == [f"Reflection Tick {k} / 5" for k in (2, 3, 4)]
    assert done[4]["prompt"].startswith("Reflection Tick 5 / 5\n\nThis is the final reflection tick.")
    assert "no actions in it will be parsed" in done[4]["prompt"]
    assert lines_of(st, "Spiro I", 2) == ["You moved to the Reflection Chamber.",
                                          "Your reflection of 5 ticks is complete."]
    assert turn(st, 2)["reply"] == act("goto lobby")  # the next turn picks up after the reflection
    # The reflection stays in the conversation the model is sent.
    assert [m["text"] for m in sent[-1][1] if m["role"] == "assistant"][1:6] == thoughts(5)


def test_reflect_with_a_custom_prompt_and_three_rounds(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro": [reflect("prompt: What did my failures have in common?", "tick: 3"),
                                      *thoughts(3)]})
    Engine(st).run(ticks=2)
    done = steps(st)
    assert [s["prompt"] for s in done] == [
        "What did my failures have in common?\n\nReflection Tick 1 / 3",
        "Reflection Tick 2 / 3",
        done[2]["prompt"],
    ]
    assert done[2]["prompt"].startswith("Reflection Tick 3 / 3\n\nThis is the final reflection tick.")
    assert "Your reflection of 3 ticks is complete." in lines_of(st, "Spiro I", 2)
    assert "You have reflected here 1 time(s); the last at tick 1." in prompt_of(st, "Spiro I", 2)


def test_a_one_round_reflection_is_also_the_final_round(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro": [reflect("tick: 1"), "Just one."]})
    Engine(st).run(ticks=2)
    [only] = steps(st)
    assert only["prompt"].startswith("You have set time aside")
    assert "Reflection Tick 1 / 1\n\nThis is the final reflection tick." in only["prompt"]


@pytest.mark.parametrize("value,rounds,warning", [
    ("3", 3, None),
    ('"3"', 3, None),
    ("4", 4, None),
    ("9", 4, "Warning: at most 4 reflection ticks are allowed (asked for 9); reflecting for 4."),
    ("0", 2, "Warning: 'tick' must be at least 1 (got 0); reflecting for the default 2 ticks."),
    ("-3", 2, "Warning: 'tick' must be at least 1 (got -3); reflecting for the default 2 ticks."),
    ("lots", 2, "Warning: 'tick: lots' is not a whole number; reflecting for the default 2 ticks."),
    ("2.5", 2, "Warning: 'tick: 2.5' is not a whole number; reflecting for the default 2 ticks."),
    ("true", 2, "Warning: 'tick: True' is not a whole number; reflecting for the default 2 ticks."),
    ("[1, 2]", 2, "Warning: 'tick: [1, 2]' is not a whole number; reflecting for the default 2 ticks."),
])
def test_reflect_rounds_are_capped_and_bad_values_fall_back_with_a_warning(
        tmp_path: Path, value: str, rounds: int, warning: str | None) -> None:
    st = station(tmp_path, {"Spiro": [reflect(f"tick: {value}"), *thoughts(rounds)]},
                 reflection={"default_rounds": 2, "max_rounds": 4})
    Engine(st).run(ticks=2)
    assert len(steps(st)) == rounds
    expected = ["You moved to the Reflection Chamber.", *([warning] if warning else []),
                f"Your reflection of {rounds} ticks is complete."]
    assert lines_of(st, "Spiro I", 2) == expected


def test_reflect_refuses_an_overlong_prompt(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro": [reflect("prompt: " + "x" * 4001)]})
    Engine(st).run(ticks=2)
    assert steps(st) == []
    assert any("'prompt' is too long (at most 4000 characters)" in x for x in lines_of(st, "Spiro I", 2))


def test_a_second_reflect_in_one_reply_is_reported_as_ignored(tmp_path: Path) -> None:
    twice = reply(act("goto reflect"), REFLECT, yaml_block("tick: 2"), REFLECT, yaml_block("tick: 3"),
                  act("goto lobby"))
    st = station(tmp_path, {"Spiro": [twice, *thoughts(2)]})
    Engine(st).run(ticks=2)
    assert len(steps(st)) == 2
    lines = lines_of(st, "Spiro I", 2)
    assert "'reflect' was not run: only one reading, test or other exchange can start per reply, and one " \
           "already started. Use it in a later turn." in lines
    assert "Your reflection of 2 ticks is complete." in lines
    assert stored(st, "Spiro I")["location"] == "lobby"  # the reply's other actions all ran


def test_actions_written_during_a_reflection_are_not_carried_out(tmp_path: Path) -> None:
    sneaky = reply("I should leave.", act("goto codex"), act("meta"), yaml_block("content: changed"))
    st = station(tmp_path, {"Spiro": [reflect("tick: 2"), sneaky, sneaky]})
    Engine(st).run(ticks=2)
    after = stored(st, "Spiro I")
    assert after["location"] == "reflect" and after["meta_prompt"] is None
    assert [a["name"] for a in json.loads(turn(st, 1)["actions"])["parsed"]] == ["goto", "reflect"]


def test_guests_may_reflect(tmp_path: Path) -> None:
    st = station(tmp_path, {}, guests=[[reflect("tick: 1"), "A guest's thought."]])
    Engine(st).run(ticks=2)
    assert len(steps(st)) == 1


# -- the scripted policy ----------------------------------------------------------------------------
def test_scripted_agents_reflect_for_three_rounds_and_talk(tmp_path: Path) -> None:
    agent = {"count": 2, "kind": "recursive", "lineage": "Spiro", "model": {"provider": "scripted", "seed": 3}}
    st = make_station(tmp_path / "s", [agent, {**agent, "count": 1, "lineage": "Curie"}],
                      lifecycle={"maturity_ticks": 0})
    Engine(st).run(ticks=12)
    reflections = [json.loads(r["internal"]) for r in st.store.all("SELECT internal, reply FROM turns")
                   if "/execute_action{reflect}" in r["reply"]]
    assert reflections and all(len(r) == 3 for r in reflections)
    for done in reflections:
        assert "Reflection Tick 3 / 3" in done[2]["prompt"]
        assert all("/execute_action" not in s["reply"] and s["reply"].strip() for s in done)
    assert messages(st), "somebody spoke in the Common Room"
