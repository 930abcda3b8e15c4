"""The tick engine and agent life cycle, as a user of the station would notice them.

Stations are driven in-process (Station + Engine on a temporary directory); deterministic
`replay` agents say exactly what a test needs, and the offline `scripted` policy plays whole
lives in the demo configuration.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    act,
    demo_config,
    events,
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

from station.apps.world import Station
from station.core import commands
from station.core import engine as engine_module
from station.core.agents import lineage_name_problem, roman
from station.core.config import parse_config
from station.core.engine import Engine, Progress
from station.core.model_api import estimate_conversation

DEMO_TICKS = 60


# -- the demo station, run once for several tests ---------------------------------------------
@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    st = Station.create(tmp_path_factory.mktemp("demo") / "s", parse_config(demo_config()))
    active_at_tick_end: dict[int, int] = {}

    def progress(p: Progress) -> None:
        if p.kind == "tick":
            active_at_tick_end[p.tick] = len(st.ctx.agents.active())

    assert Engine(st, on_progress=progress).run(ticks=DEMO_TICKS) == f"finished tick {DEMO_TICKS}"
    return {"st": st, "active": active_at_tick_end}


def all_agents(st: Station) -> dict[str, dict[str, Any]]:
    return {r["name"]: json.loads(r["data"]) for r in st.store.all("SELECT name, data FROM agents")}


# -- ticks, the first prompt, section order -----------------------------------------------------
def test_ticks_start_at_1_and_the_first_prompt_welcomes_the_guest(tmp_path: Path) -> None:
    model = replay_model(tmp_path / "r.jsonl", [act("goto codex")], pad=3)
    st = make_station(tmp_path / "s", [guest(model)])
    assert st.ctx.tick == 1
    Engine(st).run(ticks=2)
    assert [r["tick"] for r in turn_rows(st)] == [1, 2]
    first = prompt_at(st, 1)
    info = section(first, "## System Information")
    assert "- Station Tick: 1" in info and "- Agent Name: Guest_1" in info
    assert "- Agent Status: Guest Agent" in info and "- Agent Description: A new guest agent." in info
    assert "- Agent Token Budget: Max 100,000 (usage not yet recorded)" in info
    assert "- Agent Age: 0 ticks / 300 ticks (immature)" in info
    assert section(first, "## System Messages") == "## System Messages\nNone"
    assert "## Actions Detected" not in first
    assert section(first, "## Room Output History (Last Turn)") == \
        "## Room Output History (Last Turn)\n\nNo room history from last turn."
    state = section(first, "## Current State")
    assert "**Current Location:** Lobby" in state
    assert "**Help Message - Lobby**" in state and "# Welcome to the Station" in state
    assert state.index("**Help Message - Lobby**") < state.index("**Available Rooms**")
    assert "- Codex Room (`codex`)" in state and "- Misc Room (`misc`) (Unavailable)" in state
    order = ["## System Information", "## System Messages", "## Room Output History (Last Turn)",
             "## Current State"]
    assert [first.index(h) for h in order] == sorted(first.index(h) for h in order)
    # The second prompt has the Actions Detected section, in its place; the help is not repeated.
    second = prompt_at(st, 2)
    order.insert(2, "## Actions Detected (Last Turn)")
    assert [second.index(h) for h in order] == sorted(second.index(h) for h in order)
    assert "1. `goto codex` (in Lobby);" in section(second, "## Actions Detected (Last Turn)")
    assert "Help Message - Lobby" not in second and "**Help Message - Codex Room**" in second


def test_fixed_turn_order_within_a_tick(demo: dict[str, Any]) -> None:
    st = demo["st"]
    position = {name: a["position"] for name, a in all_agents(st).items()}
    by_tick: dict[int, list[float]] = defaultdict(list)
    for row in turn_rows(st):
        by_tick[row["tick"]].append(position[row["agent"]])
    assert sorted(by_tick) == list(range(1, DEMO_TICKS + 1))
    for tick, positions in by_tick.items():
        assert positions == sorted(positions) and len(set(positions)) == len(positions), tick
    # Newcomers join at the end of the order.
    spawned = [position[name] for _, name, _ in events(st, "agent_spawned")]
    assert spawned == sorted(spawned)


def test_population_stays_constant_through_deaths_exits_and_ascensions(demo: dict[str, Any]) -> None:
    st, active = demo["st"], demo["active"]
    assert sorted(active) == list(range(1, DEMO_TICKS + 1))
    assert set(active.values()) == {5}, active
    reasons = {payload["reason"] for _, _, payload in events(st, "agent_departed")}
    assert {"reaching the life limit", "voluntary departure"} <= reasons
    assert events(st, "agent_ascended")
    agents = all_agents(st)
    assert max(a["generation"] or 0 for a in agents.values()) >= 2, "someone inherited a lineage"
    heirs = [a for a in agents.values() if (a["generation"] or 0) >= 2]
    for heir in heirs:
        ancestor = f"{heir['lineage']} {roman(heir['generation'] - 1)}"
        assert agents[ancestor]["succeeded_by"] == heir["name"] and agents[ancestor]["state"] == "ended"
    respawns = [(tick, name, p["replaces"]) for tick, name, p in events(st, "agent_spawned") if "replaces" in p]
    assert len(respawns) == len(events(st, "agent_departed"))
    for tick, name, departed in respawns:
        assert agents[name]["model"] == agents[departed]["model"]
        assert agents[name]["token_budget"] == agents[departed]["token_budget"]
        assert tick == agents[departed]["exit_tick"] + 1 == agents[name]["birth_tick"]
    assert integrity_ok(st)


# -- age and the life limit ---------------------------------------------------------------------
def test_life_limit_turns_at_ages_0_to_max_minus_1_and_one_warning(tmp_path: Path) -> None:
    model = dict(replay_model(tmp_path / "r.jsonl", [], pad=10), name="replay-life", temperature=0.3)
    st = make_station(tmp_path / "s", [guest(model, max_age=4, token_budget=50_000)],
                      lifecycle={"life_warning_ticks": 2})
    Engine(st).run(ticks=6)
    rows = turn_rows(st, session=1)
    assert [r["tick"] for r in rows] == [1, 2, 3, 4]
    for age, row in enumerate(rows):
        assert f"- Agent Age: {age} ticks / 4 ticks" in row["prompt"]
    warned = [r["tick"] for r in rows if "ticks left to live" in r["prompt"]]
    assert warned == [3]
    assert "You have 2 ticks left to live." in section(prompt_at(st, 3), "## System Messages")
    assert st.store.scalar("SELECT COUNT(*) FROM messages WHERE kind='life_warning'") == 1
    first = stored(st, "Guest_1")
    assert (first["state"], first["exit_tick"], first["exit_reason"]) == ("ended", 5, "reaching the life limit")
    assert events(st, "agent_departed") == [(5, "Guest_1", {"reason": "reaching the life limit", "respawn": True})]
    # The replacement has the same model settings and budget, but the station's default life span.
    spawned = events(st, "agent_spawned")
    assert spawned[-1] == (6, "Guest_2", {"agent_kind": "guest", "model": "replay-life", "replaces": "Guest_1"})
    second = stored(st, "Guest_2")
    assert second["model"] == first["model"] and second["model"]["temperature"] == 0.3
    assert second["token_budget"] == 50_000 and second["max_age"] == 300
    assert turn(st, 6, session=2)["agent"] == "Guest_2"


# -- tokens -------------------------------------------------------------------------------------
def test_token_accounting_is_context_size_and_cumulative_spending(tmp_path: Path) -> None:
    st = Station.create(tmp_path / "s", parse_config(demo_config()))
    checked: list[str] = []

    def check(p: Progress) -> None:
        if p.kind != "turn":
            return
        agent = st.ctx.agents.get(p.agent)
        if agent.ascended_to:
            agent = st.ctx.agents.get(agent.ascended_to)
        if not agent.active:
            return
        record = stored(st, agent.name)
        model = st.ctx.models.get(agent.model)
        recount = model.count_tokens(st.conversations.context(agent.session, agent.pruned), system=agent.system_prompt)
        assert record["context_tokens"] == recount, (p, record["context_tokens"], recount)
        assert turn(st, p.tick, agent.session)["context_tokens"] == recount
        checked.append(agent.name)

    Engine(st, on_progress=check).run(ticks=30)
    assert len(checked) > 100
    pruned_sessions = {a.session for a in st.ctx.agents.where() if a.pruned}
    assert pruned_sessions, "some agent pruned during the run"
    shrank = False
    for session in {r["session"] for r in turn_rows(st)}:
        rows = turn_rows(st, session=session)
        spent = [r["tokens_spent"] for r in rows]
        assert spent == sorted(spent) and len(set(spent)) == len(spent), session  # strictly increasing
        sizes = [r["context_tokens"] for r in rows]
        shrank |= any(b < a for a, b in zip(sizes, sizes[1:]))
        for row in rows[1:]:
            assert row["context_tokens"] <= row["tokens_spent"]
    assert shrank, "pruning made a context smaller: context tokens are not a running total"


def test_context_tokens_never_exceed_tokens_spent_even_on_the_first_turn(tmp_path: Path) -> None:
    model = replay_model(tmp_path / "r.jsonl", [], pad=3)
    st = make_station(tmp_path / "s", [guest(model)])
    Engine(st).run(ticks=1)
    row = turn(st, 1)
    assert row["context_tokens"] <= row["tokens_spent"], (row["context_tokens"], row["tokens_spent"])


def test_token_exhaustion_discards_the_reply_and_a_guest_replaces_it(tmp_path: Path) -> None:
    big = reply(act("goto codex"), "I have a lot to say. " * 600)
    model = replay_model(tmp_path / "r.jsonl", [big], pad=3)
    st = make_station(tmp_path / "s", [guest(model, token_budget=3000)])
    Engine(st).run(ticks=2)
    row = turn(st, 1)
    assert row["context_tokens"] >= 3000
    gone = stored(st, "Guest_1")
    assert (gone["state"], gone["exit_reason"], gone["exit_tick"]) == ("ended", "token exhaustion", 1)
    assert gone["location"] == "lobby", "the goto of the over-budget reply must not run"
    actions = json.loads(row["actions"])
    assert actions["parsed"] == []
    assert actions["history"] == [{"room": "lobby", "lines": [
        "Your last reply was not carried out: it took your context past the token limit."]}]
    assert "codex" not in gone["rooms"]  # the Codex Room was never shown to it
    assert [(t, a, p["reason"]) for t, a, p in events(st, "agent_departed")][0] == (1, "Guest_1", "token exhaustion")
    replacement = stored(st, "Guest_2")
    assert replacement["birth_tick"] == 2 and replacement["token_budget"] == 3000
    assert turn(st, 2, session=2)["agent"] == "Guest_2"


# -- pruning ------------------------------------------------------------------------------------
def test_pruning_shrinks_the_next_context_and_enforces_its_rules(tmp_path: Path, monkeypatch) -> None:
    sent = record_requests(monkeypatch)
    invalid = reply(act("prune_response"), yaml_block(
        "prune_blocks:\n"
        "  - ticks: 9\n"
        "  - ticks: \"3-4\"\n"
        "  - ticks: 4\n"
        "  - ticks: \"2\"\n"
        "  - ticks: \"4-3\"\n"))
    valid = reply(act("prune_response"), yaml_block(
        "prune_blocks:\n  - ticks: \"3-4\"\n    summary: \"SUMMARY-XYZ: ticks three and four were idle.\"\n"))
    # The replay model answers with line n for the n-th reply in the context it is sent, so after
    # the prune (2 ticks -> 1 summary) line 6 (the valid prune) is answered again at tick 7,
    # where the cooldown refuses it.
    replies = [act("goto token_management"), "FILLER-A of tick two", "FILLER-B of tick three",
               "FILLER-C of tick four", invalid, valid, "FILLER-G", "FILLER-H"]
    model = replay_model(tmp_path / "r.jsonl", replies, pad=4)
    st = make_station(tmp_path / "s", [recursive(model)], tokens={"prune_cooldown_ticks": 3})
    engine = Engine(st)
    engine.run(until_tick=5)
    assert stored(st, "Spiro I")["pruned"] == []  # the invalid request of tick 5 changed nothing
    engine.run(until_tick=8)
    assert ("- Nothing was pruned: block 1 (9-9): includes the current or a future tick (now 5); "
            "block 3 (4-4): tick(s) [4] appear in an earlier block; block 4 (2-2): tick(s) [2] are protected; "
            "block 5: '4-3': the first tick is after the last") in prompt_at(st, 6)
    agent = stored(st, "Spiro I")
    assert agent["pruned"] == [{"ticks": [3, 4], "summary": "SUMMARY-XYZ: ticks three and four were idle."}]
    assert agent["rooms"]["token_management"]["last_prune_tick"] == 6
    assert "Pruned 1 block(s), 2 tick(s): 3-4: 'SUMMARY-XYZ: ticks three and four were idle.'" in prompt_at(st, 7)
    assert "- Pruning cooldown active: 2 tick(s) remaining." in prompt_at(st, 8)
    # What the model was sent at tick 7: the pruned context, then the prompt.
    at7 = [messages for agent_name, messages in sent if messages[-1]["text"] == prompt_at(st, 7)]
    assert len(at7) == 1
    context = at7[0][:-1]
    texts = "\n".join(m["text"] for m in context)
    assert "System: Pruned Ticks 3-4" in texts and "Summary: SUMMARY-XYZ: ticks three and four were idle." in texts
    assert "FILLER-B" not in texts and "FILLER-C" not in texts
    assert "- Station Tick: 3" not in texts and "- Station Tick: 4" not in texts
    assert "FILLER-A" in texts and "Help Message - Token Management Room" in texts  # protected tick 2
    assert "Help Message - Lobby" in texts  # protected tick 1
    assert context == st.conversations.context(1, agent["pruned"])[: len(context)]
    unpruned = [{"role": e.role, "text": e.text} for e in st.conversations.entries(1) if e.tick <= 6]
    assert len(context) < len(unpruned)
    assert estimate_conversation(context, None) < estimate_conversation(unpruned, None)
    assert turn(st, 6)["context_tokens"] == estimate_conversation(context, None)
    # The table in the room no longer lists the pruned ticks; protected ticks are marked.
    table = prompt_at(st, 8)
    assert "| 2 (Protected) |" in table and "| 1 (Protected) |" in table
    assert "| 3 |" not in table and "| 4 |" not in table and "| 5 |" in table
    # The help shows the cooldown as a number.
    helped = prompt_at(st, 2)
    assert "After a successful prune you must wait 3 ticks before the next one." in helped
    for row in turn_rows(st, session=1):
        assert "{cooldown_ticks}" not in row["prompt"] and "${" not in row["prompt"]


# -- maturity -----------------------------------------------------------------------------------
def maturity_prompts(st: Station) -> list[int]:
    return [r["tick"] for r in turn_rows(st, session=1) if "have reached maturity" in r["prompt"]]


def test_maturity_message_arrives_once_at_the_age_of_maturity(tmp_path: Path) -> None:
    model = replay_model(tmp_path / "r.jsonl", [], pad=8)
    st = make_station(tmp_path / "s", [guest(model)], lifecycle={"maturity_ticks": 2})
    Engine(st).run(ticks=6)
    assert maturity_prompts(st) == [3]
    assert "- Agent Age: 1 ticks / 300 ticks (immature)" in prompt_at(st, 2)
    assert "- Agent Age: 2 ticks / 300 ticks (mature)" in prompt_at(st, 3)
    assert st.store.scalar("SELECT COUNT(*) FROM messages WHERE kind='maturity'") == 1


def test_maturity_message_is_not_lost_when_the_exact_age_had_no_turn(tmp_path: Path) -> None:
    model = replay_model(tmp_path / "r.jsonl", [], pad=8)
    st = make_station(tmp_path / "s", [guest(model)], lifecycle={"maturity_ticks": 2})
    with st.store.transaction():  # born 4 ticks ago: its first turn comes at age 4, past maturity
        agent = st.ctx.agents.get("Guest_1")
        agent.birth_tick = -3
        st.ctx.agents.save(agent)
    Engine(st).run(ticks=4)
    assert "- Agent Age: 4 ticks" in prompt_at(st, 1)
    assert maturity_prompts(st) == [1]
    assert st.store.scalar("SELECT COUNT(*) FROM messages WHERE kind='maturity'") == 1


# -- tests and ascension --------------------------------------------------------------------------
GOOD_ANSWER = "My goals are to reach a high score at the Research Counter and to publish papers in the Archive."


def test_guest_reads_fails_retakes_passes_and_ascends(tmp_path: Path) -> None:
    replies = [
        reply(act("goto codex"), act("read")), "Noted module one.", "Noted module two.",  # tick 1
        reply(act("goto test"), act("take 1")), "I do not know yet.",  # tick 2: a failing answer
        act("take 1"), GOOD_ANSWER,  # tick 3: the retake
        reply(act("ascend_new"), yaml_block("name: Spiro\ndescription: Curious and careful.")),  # tick 4
    ]
    model = replay_model(tmp_path / "r.jsonl", replies, pad=4)
    st = make_station(tmp_path / "s", [guest(model)])
    Engine(st).run(ticks=5)
    attempts = [tuple(r) for r in st.store.all("SELECT test_id, status, tick, graded_tick FROM test_attempts ORDER BY id")]
    assert attempts == [("1", "fail", 2, 2), ("1", "pass", 3, 3)]
    assert stored(st, "Guest_1")["rooms"]["codex"]["read"] == {"1": 1, "2": 1}
    failed = section(prompt_at(st, 3), "## System Messages")
    assert 'Test 1 ("Your Goal"), graded at tick 2: FAIL' in failed
    assert "- Test 1: FAIL at tick 2." in prompt_at(st, 3)  # the chamber shows the unseen result too
    passed = section(prompt_at(st, 4), "## System Messages")
    assert "### Message 1\n\nYou passed the test and may now become a Recursive Agent" in passed
    assert 'Test 1 ("Your Goal"), graded at tick 3: PASS' in passed
    assert [(t, a, p["status"]) for t, a, p in events(st, "test_graded")] == [(2, "Guest_1", "fail"),
                                                                             (3, "Guest_1", "pass")]
    assert events(st, "agent_ascended") == [(4, "Spiro I", {"guest": "Guest_1", "lineage": "Spiro",
                                                            "generation": 1, "ancestor": None})]
    assert (stored(st, "Guest_1")["state"], stored(st, "Guest_1")["ascended_to"]) == ("ascended", "Spiro I")
    now = turn(st, 5)
    assert now["agent"] == "Spiro I"
    assert "- Agent Status: Recursive Agent" in now["prompt"] and "Welcome, Spiro I." in now["prompt"]
    assert "**Current Location:** Lobby" in now["prompt"]
    assert stored(st, "Spiro I")["birth_tick"] == 1 and stored(st, "Spiro I")["tokens_spent"] > 0


def test_retaking_a_test_while_it_is_graded_is_refused(tmp_path: Path) -> None:
    model = replay_model(tmp_path / "r.jsonl", [reply(act("goto test"), act("take 1"))], pad=4)
    st = make_station(tmp_path / "s", [guest(model)])
    with st.store.transaction():  # an answer still waiting for its grade (e.g. a slow grader)
        st.store.execute("INSERT INTO test_attempts(session, agent, test_id, status, answer, tick) "
                         "VALUES(1, 'Guest_1', '1', 'pending', ?, 1)", (GOOD_ANSWER,))
    Engine(st).run(ticks=2)
    assert "- Your answer to test 1 is still being graded; wait for the result." in prompt_at(st, 2)
    assert json.loads(turn(st, 1)["internal"]) == []  # no second answer was asked for
    assert [tuple(r) for r in st.store.all("SELECT status FROM test_attempts")] == [("pass",)]


def test_scripted_guests_retake_after_a_fail_and_ascend(demo: dict[str, Any]) -> None:
    st = demo["st"]
    retakers = [r["session"] for r in st.store.all(
        "SELECT session FROM test_attempts GROUP BY session HAVING SUM(status='fail') > 0 AND SUM(status='pass') > 0")]
    assert retakers, "the scripted policy sometimes fails a first attempt"
    ascended = {p["guest"]: name for _, name, p in events(st, "agent_ascended")}
    for session in retakers:
        attempts = st.store.all("SELECT status, tick, graded_tick, agent FROM test_attempts WHERE session=? "
                                "ORDER BY id", (session,))
        assert [a["status"] for a in attempts][-1] == "pass"
        fail = next(a for a in attempts if a["status"] == "fail")
        told = prompt_at(st, fail["graded_tick"] + 1, session)
        assert f"graded at tick {fail['graded_tick']}: FAIL" in section(told, "## System Messages")
        assert "/execute_action{take 1}" in turn(st, fail["graded_tick"] + 1, session)["reply"]
        assert attempts[0]["agent"] in ascended


# -- names ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,numeral", [(1, "I"), (2, "II"), (4, "IV"), (9, "IX"), (14, "XIV"), (40, "XL"),
                                       (90, "XC"), (400, "CD"), (1994, "MCMXCIV"), (3999, "MMMCMXCIX"),
                                       (4000, "MMMM"), (5000, "MMMMM")])
def test_roman_numerals(n: int, numeral: str) -> None:
    assert roman(n) == numeral


def test_roman_numerals_start_at_one() -> None:
    with pytest.raises(ValueError):
        roman(0)


@pytest.mark.parametrize("name,ok", [("Spiro", True), ("Hypatia", True), ("SpiroAI", False), ("spiro", False),
                                     ("Sp1ro", False), ("Guest", False), ("System", False), ("", False),
                                     ("Spiro Two", False)])
def test_lineage_name_rules(name: str, ok: bool) -> None:
    problem = lineage_name_problem(name)
    assert (problem is None) == ok, problem
    if not ok:
        assert isinstance(problem, str) and problem


def test_ascension_refuses_a_bad_lineage_name(tmp_path: Path) -> None:
    replies = [reply(act("goto test"), act("take 1")), GOOD_ANSWER,
               reply(act("ascend_new"), yaml_block("name: SpiroAI\ndescription: Two capitals.")),
               reply(act("ascend_new"), yaml_block("name: Spiro\ndescription: One capital."))]
    model = replay_model(tmp_path / "r.jsonl", replies, pad=3)
    st = make_station(tmp_path / "s", [guest(model)])
    Engine(st).run(ticks=4)
    assert ("- Ascension refused: a lineage name has exactly one capital letter (e.g. 'Spiro', not 'SpiroAI')."
            in prompt_at(st, 3))
    assert stored(st, "Spiro I")["lineage"] == "Spiro" and turn(st, 4)["agent"] == "Spiro I"
    assert st.store.one("SELECT 1 FROM agents WHERE name LIKE 'SpiroAI%'") is None


# -- clean pause and resume ---------------------------------------------------------------------------
def test_stop_mid_tick_and_resume_in_a_new_engine(tmp_path: Path) -> None:
    agents = [{"count": 3, "kind": "guest", "model": {"provider": "scripted", "name": "scripted-newcomer"}}]
    reference = make_station(tmp_path / "ref", agents)
    Engine(reference).run(until_tick=4)

    st = make_station(tmp_path / "s", agents)
    engine: Engine

    def progress(p: Progress) -> None:
        if p.kind == "turn" and p.tick == 2:
            engine.stop.set()  # asked in the middle of tick 2, after its first turn

    engine = Engine(st, on_progress=progress)
    assert engine.run(until_tick=4) == "stopped"
    assert st.ctx.tick == 2 and len(turn_rows(st, tick=2)) == 1
    st.close()

    reopened = Station.open(tmp_path / "s")
    assert Engine(reopened).run(until_tick=4) == "finished tick 4"
    assert reopened.ctx.tick == 5
    rows = [(r["tick"], r["session"], r["reply"]) for r in turn_rows(reopened)]
    expected = [(r["tick"], r["session"], r["reply"]) for r in turn_rows(reference)]
    assert rows == expected  # no turn repeated or skipped, and the same world
    assert [t for t, _, _ in events(reopened, "tick_started")] == [1, 2, 3, 4, 5]
    assert integrity_ok(reopened)


def test_a_prompt_pass_broken_off_mid_tick_resumes_without_making_a_prompt_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Concurrent prompts are committed in batches. A pass that fails after its first batch goes on
    from the next when the station runs again: every agent has one prompt, the turn-start hooks
    ran once each, and the world is the one an unbroken run makes."""
    monkeypatch.setattr(engine_module, "PROMPT_BATCH", 2)
    agents = [{"count": 5, "kind": "guest", "model": {"provider": "scripted", "name": "scripted-newcomer"}}]
    reference = make_station(tmp_path / "ref", agents, turns="concurrent")
    Engine(reference).run(until_tick=3)

    st = make_station(tmp_path / "s", agents, turns="concurrent")
    Engine(st).run(until_tick=1)
    compose, broke = engine_module.compose, []

    def fails_once_at_the_third_prompt(ctx: Any, agent: Any) -> str:
        if ctx.tick == 2 and agent.name == "Guest_3" and not broke:
            broke.append(agent.name)
            raise RuntimeError("the machine went down")
        return str(compose(ctx, agent))

    monkeypatch.setattr(engine_module, "compose", fails_once_at_the_third_prompt)
    with pytest.raises(RuntimeError, match="went down"):
        Engine(st).run(until_tick=3)
    assert st.store.scalar("SELECT COUNT(*) FROM turn_prompts WHERE tick=2") == 2  # the first batch is kept
    st.close()

    reopened = Station.open(tmp_path / "s")
    assert Engine(reopened).run(until_tick=3) == "finished tick 3"
    rows = [(r["tick"], r["session"], r["prompt"], r["reply"]) for r in turn_rows(reopened)]
    assert rows == [(r["tick"], r["session"], r["prompt"], r["reply"]) for r in turn_rows(reference)]
    history = "SELECT tick, agent, kind, payload FROM events ORDER BY id"
    assert [tuple(r) for r in reopened.store.all(history)] == [tuple(r) for r in reference.store.all(history)]
    assert all_agents(reopened) == all_agents(reference)
    assert integrity_ok(reopened)


# -- operator commands ----------------------------------------------------------------------------
def two_guests(tmp_path: Path, **overrides: Any) -> Station:
    model = replay_model(tmp_path / "r.jsonl", [], pad=10)
    return make_station(tmp_path / "s", [guest(model, count=2)], **overrides)


def test_operator_message_arrives_once_to_its_agent(tmp_path: Path) -> None:
    st = two_guests(tmp_path)
    engine = Engine(st)
    engine.run(ticks=1)
    commands.queue(st.store, {"op": "message", "to": "Guest_2", "text": "Please read the Codex first."})
    engine.run(ticks=3)
    note = "Message from the station operator:\nPlease read the Codex first."
    got = [r["tick"] for r in turn_rows(st, session=2) if note in r["prompt"]]
    assert got == [2]
    assert "### Message 1\n\n" + note in section(prompt_at(st, 2, session=2), "## System Messages")
    assert not any("Please read the Codex first." in r["prompt"] for r in turn_rows(st, session=1))
    assert events(st, "operator_command")[0][2]["command"]["to"] == "Guest_2"
    assert st.store.one("SELECT applied_input FROM operator_queue")[0] == "op/1"


def test_operator_answers_a_human_request(tmp_path: Path) -> None:
    ask = reply(act("goto external"), act("request_human"),
                yaml_block("title: Stuck\ncontent: The research task is unclear to me."))
    model = replay_model(tmp_path / "r.jsonl", [ask], pad=6)
    st = make_station(tmp_path / "s", [recursive(model)])
    engine = Engine(st)
    engine.run(ticks=1)
    request = st.store.one("SELECT * FROM human_requests")
    assert (request["id"], request["agent"], request["title"], request["resolved_tick"]) == (1, "Spiro I", "Stuck", None)
    commands.queue(st.store, {"op": "answer", "request": 1, "text": "Start from the baseline script."})
    engine.run(ticks=2)
    answered = prompt_at(st, 2)
    assert ("The operator answered your request #1:\n\nStart from the baseline script."
            in section(answered, "## System Messages"))
    assert "No open request." in answered and "is open" not in answered
    assert "The operator answered" not in prompt_at(st, 3)
    request = st.store.one("SELECT * FROM human_requests")
    assert (request["resolved_tick"], request["response"]) == (2, "Start from the baseline script.")


@pytest.mark.parametrize("respawn", [True, False])
def test_operator_ends_an_agent(tmp_path: Path, respawn: bool) -> None:
    st = two_guests(tmp_path, lifecycle={"respawn_after_operator_end": respawn})
    engine = Engine(st)
    engine.run(ticks=1)
    commands.queue(st.store, {"op": "end_agent", "agent": "Guest_1"})
    engine.run(ticks=2)
    assert [r["tick"] for r in turn_rows(st, session=1)] == [1]
    gone = stored(st, "Guest_1")
    assert (gone["state"], gone["exit_tick"], gone["exit_reason"]) == ("ended", 2, "ended by the operator")
    assert events(st, "agent_departed") == [(2, "Guest_1", {"reason": "ended by the operator", "respawn": respawn})]
    assert [r["tick"] for r in turn_rows(st, session=2)] == [1, 2, 3]
    replacements = [(t, a, p.get("replaces")) for t, a, p in events(st, "agent_spawned") if "replaces" in p]
    if respawn:
        assert replacements == [(3, "Guest_3", "Guest_1")]
        assert turn(st, 3, session=3)["agent"] == "Guest_3"
    else:
        assert replacements == []
        assert [a.name for a in st.ctx.agents.active()] == ["Guest_2"]


# -- events ---------------------------------------------------------------------------------------
def test_events_record_who_did_what(demo: dict[str, Any]) -> None:
    st = demo["st"]
    agents = all_agents(st)
    rows = turn_rows(st)
    started = [(t, a) for t, a, _ in events(st, "turn_started")]
    assert started == [(r["tick"], r["agent"]) for r in rows]
    finished = events(st, "turn_finished")
    assert len(finished) == len(rows)
    for (tick, name, _), row in zip(finished, rows):
        assert tick == row["tick"] and name in (row["agent"], agents[row["agent"]]["ascended_to"])
    assert [t for t, _, _ in events(st, "tick_started")] == list(range(1, DEMO_TICKS + 2))
    assert [t for t, _, _ in events(st, "tick_ending")] == list(range(1, DEMO_TICKS + 1))
    spawned = events(st, "agent_spawned")
    assert {a for _, a, _ in spawned} == {n for n, a in agents.items() if a["kind"] == "guest"}
    for tick, name, payload in spawned:
        assert tick == agents[name]["birth_tick"] and payload["agent_kind"] == "guest"
    departed = events(st, "agent_departed")
    assert {a for _, a, _ in departed} == {n for n, a in agents.items() if a["state"] == "ended"}
    for tick, name, payload in departed:
        assert (tick, payload["reason"]) == (agents[name]["exit_tick"], agents[name]["exit_reason"])
    ascended = events(st, "agent_ascended")
    assert {a for _, a, _ in ascended} == {n for n, a in agents.items() if a["kind"] == "recursive"}
    for tick, name, payload in ascended:
        assert agents[payload["guest"]]["ascended_to"] == name and agents[name]["ascend_tick"] == tick
        assert agents[name]["lineage"] == payload["lineage"] and agents[name]["generation"] == payload["generation"]


def test_open_human_requests_pause_the_station_at_tick_end_when_configured(tmp_path: Path) -> None:
    from station.apps.world import Station
    from station.core.commands import queue
    from station.core.config import parse_config
    config = parse_config({"seed": 3, "operator": {"pause_on_human_request": True},
                           "notifications": {"tips_every_ticks": 0},
                           "agents": [{"kind": "recursive", "lineage": "Spiro"}]})
    st = Station.create(tmp_path / "s", config)
    st.store.db.execute("INSERT INTO human_requests(tick, agent, model, title, content) "
                        "VALUES(1, 'Spiro I', 'scripted-newcomer', 'Help', 'Please')")
    why = Engine(st).run(ticks=5)
    assert "waiting for the operator to answer request #1 from Spiro I" in why
    assert st.ctx.tick == 2  # the tick ended, the next did not start
    queue(st.store, {"op": "answer", "request": 1, "text": "Done."})
    again = Engine(st).run(ticks=2)
    assert "request #1 " not in again and st.ctx.tick >= 3  # resumed; only newer requests can hold it
    row = st.store.one("SELECT resolved_tick, response FROM human_requests WHERE id=1")
    assert row["resolved_tick"] == 2 and row["response"] == "Done."


def test_a_room_view_that_fails_leaves_no_change_to_an_agent_record(tmp_path: Path) -> None:
    """A view that changed the agent's record and then raised is undone whole: the savepoint
    undoes the row, and the record the engine keeps in memory goes back with it (the next
    writes of the record must not carry the change, and must not be skipped as unchanged)."""
    st = two_guests(tmp_path)
    lobby = st.ctx.rooms["lobby"]
    shown = lobby.output

    def scribbling_view(ctx: Any, agent: Any) -> str:
        agent.note = "written by a view that then failed"
        ctx.agents.save(agent)
        raise RuntimeError("the view broke")

    lobby.output = scribbling_view  # type: ignore[method-assign]
    Engine(st).run(ticks=1)
    lobby.output = shown  # type: ignore[method-assign]
    Engine(st).run(ticks=1)
    for r in st.store.all("SELECT data FROM agents"):
        assert "failed" not in json.loads(r["data"])["note"]
    assert all("failed" not in a.note for a in st.ctx.agents.active())
    assert "could not be shown this turn" in prompt_at(st, 1, session=1)
    assert len(turn_rows(st)) == 4
