"""A station records its room set: a room added to the code joins new stations, and an existing one
only when its operator enables it, at a tick that a replay reproduces (issue 31).

The added room is a real room registered by this module for the length of a test (a Lobby entry,
a table of its own, one action); the stations are real ones run by the engine."""
from __future__ import annotations

import copy
import gzip
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rooms import ROOMS_BEFORE_RECORDING, room_classes
from station.apps import cli
from station.apps.world import Station
from station.core.config import load_config
from station.core.context import Context
from station.core.engine import Engine
from station.core.room import ROOMS, Outcome, Room, action, register_room
from station.core.store import Store, canonical_dump

ROOT = Path(__file__).resolve().parents[1]
SOCIAL = ROOT / "configs" / "social_demo.yaml"
RECORDED = ROOT / "data" / "recorded" / "demo-before-redesign.db.gz"


class QuietGarden(Room):
    short, name = "quiet_garden", "Quiet Garden"
    lobby_order = 125
    migrations = ["CREATE TABLE garden_visits (id INTEGER PRIMARY KEY AUTOINCREMENT, agent TEXT NOT NULL)"]

    def render(self, ctx: Context, agent: Any) -> str:
        return "Birdsong. Nothing here needs doing."

    @action("sit")
    def sit(self, ctx: Context, agent: Any, args: str | None, params: None) -> Outcome:
        ctx.store.execute("INSERT INTO garden_visits(agent) VALUES(?)", (agent.name,))
        return Outcome(["You sit for a while."])


@pytest.fixture
def garden() -> Iterator[None]:
    register_room(QuietGarden)
    try:
        yield
    finally:
        ROOMS.remove(QuietGarden.short)


def run(directory: Path, until_tick: int) -> None:
    station = Station.open(directory)
    try:
        Engine(station).run(until_tick=until_tick)
    finally:
        station.close()


def lobby_listings(directory: Path) -> dict[int, list[str]]:
    """The prompts that show the Lobby's list of rooms, by tick."""
    store = Store(directory)
    try:
        rows = store.all("SELECT tick, prompt FROM turns WHERE prompt LIKE '%**Available Rooms**%'")
    finally:
        store.close()
    listings: dict[int, list[str]] = {}
    for row in rows:
        listings.setdefault(row["tick"], []).append(row["prompt"])
    return listings


def ticks_listing_the_garden(directory: Path) -> list[int]:
    return sorted(tick for tick, prompts in lobby_listings(directory).items() if any("Quiet Garden" in p for p in prompts))


def world(directory: Path) -> dict[str, Any]:
    store = Store(directory)
    try:
        return copy.deepcopy(canonical_dump(store))
    finally:
        store.close()


def test_a_new_station_records_every_room_and_an_old_one_keeps_its_own(tmp_path: Path, garden: None) -> None:
    config = load_config(SOCIAL)
    new = Station.create(tmp_path / "new", config)
    try:
        assert new.config.rooms.enabled == [cls.short for cls in room_classes()]
        assert "quiet_garden" in new.ctx.rooms
        assert new.store.get_meta("config")["rooms"]["enabled"] == new.config.rooms.enabled
    finally:
        new.close()

    old = tmp_path / "old"  # recorded before stations recorded their rooms: no rooms.enabled
    old.mkdir()
    with gzip.open(RECORDED) as src, open(old / "station.db", "wb") as dst:
        shutil.copyfileobj(src, dst)
    station = Station.open(old)
    try:
        assert station.store.get_meta("config")["rooms"].get("enabled") is None
        assert list(station.ctx.rooms) == list(ROOMS_BEFORE_RECORDING)
    finally:
        station.close()


def test_a_room_added_to_the_code_leaves_a_recorded_station_and_its_replay_alone(tmp_path: Path) -> None:
    source = tmp_path / "source"
    Station.create(source, load_config(SOCIAL)).close()
    run(source, 4)
    register_room(QuietGarden)  # the code gains a room after the station was made
    try:
        run(source, 6)  # resumed on the newer code
        assert max(lobby_listings(source)) > 4 and ticks_listing_the_garden(source) == []
        assert cli.main(["replay", str(source), str(tmp_path / "replayed")]) == 0
    finally:
        ROOMS.remove(QuietGarden.short)
    assert world(tmp_path / "replayed") == world(source)


def test_the_operator_opens_a_new_room_on_a_running_station_and_a_replay_opens_it_at_the_same_tick(
    tmp_path: Path, garden: None, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "source"
    every_but_the_garden = [cls.short for cls in room_classes() if cls.short != "quiet_garden"]
    config = load_config(SOCIAL)
    config = config.model_copy(update={"rooms": config.rooms.model_copy(update={"enabled": every_but_the_garden})})
    Station.create(source, config).close()
    run(source, 3)

    enabled = "[" + ", ".join([*every_but_the_garden, "quiet_garden"]) + "]"
    assert cli.main(["set", str(source), "rooms.enabled", enabled]) == 0
    run(source, 6)
    station = Station.open(source)
    try:
        assert "quiet_garden" in station.ctx.rooms
        assert station.store.scalar("SELECT COUNT(*) FROM garden_visits") == 0  # its table was made
    finally:
        station.close()
    assert min(lobby_listings(source)) <= 3 and ticks_listing_the_garden(source)[0] == 4  # from the next tick on

    assert cli.main(["replay", str(source), str(tmp_path / "replayed")]) == 0
    assert world(tmp_path / "replayed") == world(source)


@pytest.mark.parametrize(
    ("key", "value", "refusal"),
    [
        ("rooms.enabled", "[lobby, exit]", "a station keeps the rooms it has"),
        ("rooms.enabled", "[lobby, exit, codex, no_such_room]", "unknown room(s) ['no_such_room']"),
        ("rooms.enabled", "[lobby, codex]", "rooms ['exit'] cannot be left out"),
        ("rooms.enabled.1", "misc", "a room is listed twice"),  # one entry of the list
        ("rooms.enabled.99", "misc", "has no entry 99 there (it has 0 to 13)"),
    ],
)
def test_a_room_set_change_that_is_not_an_addition_is_refused_with_its_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: str, refusal: str
) -> None:
    source = tmp_path / "source"
    Station.create(source, load_config(SOCIAL)).close()
    assert cli.main(["set", str(source), key, value]) != 0
    assert refusal in capsys.readouterr().err
    store = Store(source)
    try:
        assert store.scalar("SELECT COUNT(*) FROM operator_queue") == 0  # nothing queued
    finally:
        store.close()


def test_swapping_one_entry_for_a_new_room_is_refused_like_a_whole_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "source"
    Station.create(source, load_config(SOCIAL)).close()
    register_room(QuietGarden)
    try:
        assert cli.main(["set", str(source), "rooms.enabled.1", "quiet_garden"]) != 0  # the codex, swapped
    finally:
        ROOMS.remove(QuietGarden.short)
    assert "a station keeps the rooms it has (codex)" in capsys.readouterr().err
