"""`prompt.style: compact`: prompts that fit small and local models.

The standing rules (action syntax with an example, the rooms, token advice) go once into a
system prompt sent the provider's own way; each turn's message keeps its sections but leaves
out what is empty or repeated. The full style (the default) stays the paper's, with no system
prompt of the station's. Token advice scales with a small context window in both styles.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers import act, demo_config, guest, make_station, replay_model, reply, turn_rows
from provider_server import Answer, ProviderServer

from station.apps.world import Station
from station.core.actions import parse_actions
from station.core.config import ConfigError, parse_config
from station.core.engine import Engine
from station.core.lifecycle import effective_limit
from station.core.model_api import estimate_conversation
from station.core.prompt import standing_rules, system_prompt
from station.core.texts import Texts, token_amount, token_reserve
from station.models.scripted import ScriptedModel

SCRIPTED = {"provider": "scripted", "name": "scripted-newcomer"}
SMALL = {**SCRIPTED, "context_limit": 8192, "max_output_tokens": 1024}  # an 8k local model: limit 7,168
HELP_HEADER = re.compile(r"\*\*Help Message - ([^*]+)\*\*")


def record_systems(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str | None]]:
    """Every (agent, system) a scripted agent model is sent."""
    sent: list[tuple[str, str | None]] = []
    original = ScriptedModel.complete

    def complete(self: ScriptedModel, messages: list[dict[str, str]], *, system: str | None, agent: str) -> Any:
        sent.append((agent, system))
        return original(self, messages, system=system, agent=agent)

    monkeypatch.setattr(ScriptedModel, "complete", complete)
    return sent


def first_call(tmp_path: Path, style: str, model: dict[str, Any] = SCRIPTED) -> tuple[str | None, str, Station]:
    """(system prompt, first message) of a new guest's first call, with the default config."""
    st = make_station(tmp_path / style, [guest(model)], prompt={"style": style})
    Engine(st).run(ticks=1)
    first = turn_rows(st)[0]["prompt"]
    return system_prompt(st.ctx, st.ctx.agents.get("Guest_1")), first, st


# -- the config -------------------------------------------------------------------------------
def test_the_style_is_a_prompt_setting_that_defaults_to_the_papers_full_prompts() -> None:
    assert parse_config({}).prompt.style == "full"
    assert parse_config({"prompt": {"style": "compact"}}).prompt.style == "compact"
    with pytest.raises(ConfigError, match=r"prompt\.style"):
        parse_config({"prompt": {"style": "tiny"}})


# -- a whole compact station ----------------------------------------------------------------
@pytest.fixture(scope="module")
def compact_run(tmp_path_factory: pytest.TempPathFactory) -> Station:
    """The social demo's world (no research), four scripted agents, 30 ticks, compact prompts."""
    cfg = demo_config(name="compact", prompt={"style": "compact"}, engine={"backup_every_ticks": 0},
                      agents=[{"count": 4, "kind": "guest", "model": SCRIPTED}])
    st = Station.create(tmp_path_factory.mktemp("compact") / "s", parse_config(cfg))
    assert Engine(st).run(ticks=30) == "finished tick 30"
    return st


def test_a_compact_station_of_scripted_agents_lives_whole_lives(compact_run: Station) -> None:
    st = compact_run
    rows = turn_rows(st)
    assert {r["tick"] for r in rows} == set(range(1, 31))
    kinds = Counter(r["kind"] for r in st.store.all("SELECT kind FROM events"))
    assert kinds["agent_ascended"] >= 3  # read the codex, passed the test, ascended
    assert kinds["agent_departed"] >= 1 and kinds["agent_spawned"] > 4  # lives end, guests replace them
    visited = {r["room"] for r in rows}
    assert {"codex", "test", "mail", "private_memory", "token_management"} <= visited
    for row in rows:  # every section the policy reads is there; the per-turn navigation is not
        assert row["prompt"].startswith("## System Information\n- Station Tick: ")
        assert "**Current Location:** " in row["prompt"]
        assert "**Navigation & Help:**" not in row["prompt"]
        assert "No room history from last turn." not in row["prompt"]


def test_the_first_visit_help_of_each_room_appears_once_in_a_life(compact_run: Station) -> None:
    st = compact_run
    seen_any = Counter()
    for session in {r["session"] for r in turn_rows(st)}:
        texts = [r["prompt"] for r in turn_rows(st, session=session)]
        texts += [step["prompt"] for r in turn_rows(st, session=session) for step in _internal(r)]
        shown = Counter(name for text in texts for name in HELP_HEADER.findall(text))
        assert all(count == 1 for count in shown.values()), (session, shown)
        seen_any.update(shown)
    assert {"Lobby", "Codex Room", "Test Chamber"} <= set(seen_any)


def _internal(row: Any) -> list[dict[str, str]]:
    return json.loads(row["internal"] or "[]")


def test_the_compact_lobby_help_is_short_and_the_rules_are_in_the_system_prompt(tmp_path: Path) -> None:
    system, first, st = first_call(tmp_path, "compact")
    assert system is not None and system == standing_rules(st.ctx, st.ctx.agents.get("Guest_1"))
    # the action syntax with one example that the station itself parses as intended
    example = system[system.index("/execute_action{meta}"):system.index("Anywhere:")]
    parsed = parse_actions(example, max_actions=10)
    assert [a.name for a in parsed] == ["meta", "goto"] and parsed[0].params == {
        "content": "Plan: read the Codex, then take the test."} and parsed[1].args == "codex"
    rooms = re.search(r"^Rooms: (.+)\.$", system, re.MULTILINE)
    assert rooms and rooms.group(1).split(", ") == list(st.ctx.rooms)
    assert "You live at most 300 ticks." in system and "In your first 50 ticks you work alone" in system
    # the first message: the status, the short welcome once, and the Lobby's list of rooms
    assert "**Help Message - Lobby**" in first and "`goto test`, then `take 1`" in first
    assert "## System Messages" not in first and "## Room Output History" not in first
    assert "- Station Status: Healthy" not in first and "A new guest agent." not in first
    assert "**Available Rooms**" in first and "- Test Chamber (`test`)" in first
    assert "/execute_action{<action>" not in first  # said once, in the system prompt


def test_the_compact_first_call_is_much_smaller_than_the_full_one(tmp_path: Path) -> None:
    full_system, full_first, _ = first_call(tmp_path, "full")
    system, first, _ = first_call(tmp_path, "compact")
    assert full_system is None
    full = estimate_conversation([{"role": "user", "text": full_first}], None)
    compact = estimate_conversation([{"role": "user", "text": first}], system)
    message = estimate_conversation([{"role": "user", "text": first}], None)
    assert compact < 600 and compact < 0.7 * full  # system prompt and first message together
    assert message < 0.4 * full  # what is new in each guest's first call (the system prompt is cached)


def test_the_system_prompt_is_sent_with_every_call_and_the_agents_own_comes_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = record_systems(monkeypatch)
    st = make_station(tmp_path / "s", [guest(SCRIPTED, system_prompt="You are careful and brief.")],
                      prompt={"style": "compact"})
    Engine(st).run(ticks=3)  # tick 2 reads the codex: an exchange of several calls in one turn
    agent = st.ctx.agents.get("Guest_1")
    expected = standing_rules(st.ctx, agent) + "\n\nYou are careful and brief."
    assert len(sent) > 3 and {system for _, system in sent} == {expected}


def test_the_full_style_sends_only_the_agents_own_system_prompt(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    sent = record_systems(monkeypatch)
    st = make_station(tmp_path / "s", [guest(SCRIPTED), guest(SCRIPTED, system_prompt="Be brief.")])
    Engine(st).run(ticks=2)
    assert {(agent, system) for agent, system in sent} == {("Guest_1", None), ("Guest_2", "Be brief.")}
    first = turn_rows(st)[0]["prompt"]
    assert "**Navigation & Help:**" in first and "## Your first goal: promotion" in first


# -- on the wire ------------------------------------------------------------------------------
def test_providers_get_the_rules_as_their_own_system_prompt_marked_for_caching(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "loopback-key")
    monkeypatch.setenv("OPENAI_API_KEY", "loopback-key")
    with ProviderServer(lambda request: Answer("I look around.\n" + act("goto mail"))) as server:
        def remote(**model: Any) -> dict[str, Any]:
            base = server.openai_url if model["provider"] == "openai" else server.url
            return {**model, "base_url": base, "max_retries": 0, "timeout_s": 20, "context_limit": 32768,
                    "max_output_tokens": 1024}
        st = make_station(tmp_path / "s", [guest(remote(provider="anthropic", name="claude-small")),
                                           guest(remote(provider="openai", api="chat", name="local-small"))],
                          prompt={"style": "compact"})
        Engine(st).run(ticks=2)
        rules = standing_rules(st.ctx, st.ctx.agents.get("Guest_1"))
        calls = [r for r in server.requests if r.method == "POST"]
    assert len(calls) == 4 and all(r.system == rules for r in calls)  # the same text for both agents
    claude = [r for r in calls if r.provider == "anthropic"]
    assert claude[0].body["system"] == [{"type": "text", "text": rules, "cache_control": {"type": "ephemeral"}}]
    local = [r for r in calls if r.provider == "openai-chat"]
    assert local[0].body["messages"][0] == {"role": "system", "content": rules}


# -- token advice -----------------------------------------------------------------------------
def test_the_token_reserve_is_10k_for_large_limits_and_a_quarter_of_small_ones() -> None:
    assert [token_amount(token_reserve(n)) for n in (1_000_000, 100_000, 40_000)] == ["10k"] * 3
    assert token_amount(token_reserve(7168)) == "1.8k" and token_amount(token_reserve(2000)) == "500"
    assert token_reserve(20_000) == 5000


def test_exit_help_keeps_the_papers_10k_for_default_budgets_and_scales_for_a_small_model(tmp_path: Path) -> None:
    st = make_station(tmp_path / "s", [guest(SCRIPTED), guest(SMALL)])
    exit_room = st.ctx.room("exit")
    big, small = st.ctx.agents.get("Guest_1"), st.ctx.agents.get("Guest_2")
    assert "As a rule, staying is safe while you have more than 10k tokens left." in exit_room.help(st.ctx, big)
    assert effective_limit(st.ctx, small) == 7168
    assert "staying is safe while you have more than 1.8k tokens left." in exit_room.help(st.ctx, small)


def test_the_compact_system_prompt_and_token_warnings_scale_with_a_small_context_limit(tmp_path: Path) -> None:
    st = make_station(tmp_path / "s", [guest(SMALL), guest(SCRIPTED)], prompt={"style": "compact"})
    small, big = st.ctx.agents.get("Guest_1"), st.ctx.agents.get("Guest_2")
    assert "Keep more than 1.8k tokens free" in standing_rules(st.ctx, small)
    assert "Keep more than 10k tokens free" in standing_rules(st.ctx, big)
    texts = st.ctx.texts
    assert "more than 1.8k tokens remain" in texts.render("recursive_token_prewarning", used="5,400",
                                                          limit="7,168", pct="75", reserve="1.8k")


def test_a_small_recursive_agent_is_warned_with_the_scaled_reserve(tmp_path: Path) -> None:
    # One replayed recursive agent on an 8k model: its reply fills three quarters of the window.
    long_reply = reply("Thinking at length. " * 1200, act("goto lobby"))
    model = {**replay_model(tmp_path / "r.jsonl", [long_reply], pad=3), "context_limit": 8192,
             "max_output_tokens": 1024}
    st = make_station(tmp_path / "s", [{"count": 1, "kind": "recursive", "lineage": "Spiro", "model": model}])
    Engine(st).run(ticks=2)
    second = turn_rows(st)[1]["prompt"]
    assert "Token notice" in second or "Token warning" in second
    assert "more than 1.8k tokens" in second and "10k" not in second


# -- texts ------------------------------------------------------------------------------------
def test_compact_help_falls_back_to_the_rooms_usual_help() -> None:
    full, compact = Texts("research"), Texts("research", style="compact")
    assert compact.help("lobby", guest_mail_limit=3) != full.help("lobby", life_section="", isolation_section="",
                                                                   guest_mail_limit=3)
    assert compact.help("mail", guest_mail_limit=3) == full.help("mail", guest_mail_limit=3)
    overridden = Texts("research", {"lobby_help": "Our own welcome."}, style="compact")
    assert overridden.help("lobby") == "Our own welcome."
