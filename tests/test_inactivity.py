"""Inactivity warnings reach a recursive agent that runs no productive action (spec capsules §10):
at the threshold, then every `inactivity_repeat_ticks` turns; a submission starts the count again.

Before issue 19 the count lived only in the engine's cached agent record and was never saved, so it
started from zero every turn and no warning was ever sent; the engine now writes every changed
record before a unit commits."""

from __future__ import annotations

from pathlib import Path

from helpers import act, make_station, recursive, replay_model, reply, stored, yaml_block

from station.core.engine import Engine

FILLER = "Nothing to do this turn; I keep thinking."
SUBMIT = reply(
    act("goto research"),
    act("submit 1"),
    yaml_block("title: Probe\ntags: probe\nabstract: Prints one line.\ncontent: |\n  print('hello')"),
)


def warned_at(st, name: str) -> list[int]:
    rows = st.store.all("SELECT tick FROM messages WHERE agent=? AND kind='inactivity' ORDER BY id", (name,))
    return [r["tick"] for r in rows]


def test_warnings_come_at_the_threshold_again_every_repeat_and_a_submission_resets_the_count(tmp_path: Path) -> None:
    replies = [FILLER, FILLER, FILLER, SUBMIT]  # turns 1-3 idle, turn 4 productive, then idle again
    model = replay_model(tmp_path / "idle.jsonl", replies, name="idle", pad=20)
    st = make_station(
        tmp_path / "st",
        [recursive(model)],
        notifications={"inactivity_threshold": 3, "inactivity_repeat_ticks": 2},
        research={"tasks": [{"evaluator": "general_python"}], "executor": {"kind": "local", "max_parallel": 1}},
    )
    try:
        Engine(st).run(until_tick=10)
        name = st.ctx.agents.active()[0].name
        # one turn per tick: counts 1, 2, 3 (warned), 0 (submitted), 1, 2, 3 (warned), 4, 5 (warned), 6
        assert warned_at(st, name) == [3, 7, 9]
        assert stored(st, name)["flags"]["inactive_turns"] == 6  # the count itself is kept between turns
        text = st.store.one("SELECT text FROM messages WHERE agent=? AND kind='inactivity'", (name,))["text"]
        assert "3" in text  # it says for how long
    finally:
        st.close()
