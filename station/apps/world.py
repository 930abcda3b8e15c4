"""Opening and creating a station directory: store, config, texts, rooms, hooks, context."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from evaluators import scoring_process
from rooms import check_known, every_room, load_rooms, recorded_room_set, room_classes
from rooms.research.config import ResearchConfig
from rooms.research.tasks import ResearchTasks, load_tasks, open_tasks, record_tasks, recorded_tasks, tasks_of
from station.core import lifecycle
from station.core.agents import AgentRegistry
from station.core.budget import Ledger
from station.core.commands import with_value
from station.core.config import StationConfig, parse_config
from station.core.context import Context
from station.core.conversation import Conversations
from station.core.events import StationCreated, TickStarted
from station.core.hooks import load_hooks
from station.core.room import Room
from station.core.store import CORE_MIGRATIONS, Store, StoreError, absolute
from station.core.texts import Texts
from station.models import ModelPool

FORMAT_VERSION = 1


def station_room_classes(config: StationConfig) -> list[type[Room]]:
    """The classes of the rooms a station's config has, without building them (a reader while it may run)."""
    names = recorded_room_set(config.rooms.enabled, config.rooms.disabled)
    return [cls for cls in room_classes() if cls.short in names]


def room_set_change(before: StationConfig, after: StationConfig) -> list[str]:
    """The rooms a config change adds to a station. Taking one away is refused: agents may be in it,
    and what they left there stays readable."""
    was = recorded_room_set(before.rooms.enabled, before.rooms.disabled)
    now = recorded_room_set(after.rooms.enabled, after.rooms.disabled)
    check_known(now, "rooms.enabled")
    kept_out = [short for short in was if short not in now]
    if kept_out:
        raise ValueError(f"rooms.enabled: a station keeps the rooms it has ({', '.join(kept_out)}); list them too")
    return [short for short in now if short not in was]


def check_room_set(config: StationConfig, key: str, value: object) -> None:
    """Refuse now a `set` of the room set that the run would refuse when it applies it."""
    if key.startswith("rooms."):  # the whole list or one entry of it (rooms.enabled.3)
        room_set_change(config, with_value(config, key, value))


class Station:
    """Everything a running (or inspected) station needs, wired together."""

    def __init__(self, store: Store, config: StationConfig, tasks: ResearchTasks) -> None:
        self.store = store
        self.texts = Texts(config.codex.set, config.codex.texts, style=config.prompt.style)
        self.agents = AgentRegistry(store)
        self.conversations = Conversations(
            store, config.tokens.protected_keywords, cache_bytes=config.engine.conversation_cache_mb << 20
        )
        self.ctx = Context(store, config, self.texts, self.agents, self.conversations)
        self.ctx.attach(tasks)
        rooms = self._build_rooms(recorded_room_set(config.rooms.enabled, config.rooms.disabled))
        self.ctx.rooms = {room.short: room for room in rooms}
        self.ctx.hooks = load_hooks(config, rooms)
        for hook in self.ctx.hooks:
            store.migrate(f"hook:{hook.name}", hook.migrations)
        self.ctx.open_rooms = self.open_rooms
        self.ctx.models = ModelPool(
            Ledger(store.dir, lambda: self.ctx.config),
            request_processes=config.engine.request_processes,
            providers=lambda: (model.provider for model in self.ctx.config.all_models()),
            branch_seed=store.get_meta("branch_seed"),  # None unless a fork made it a branch (multistart)
        )

    def _build_rooms(self, names: list[str]) -> list[Room]:
        """The named rooms, their tables made; the Research Counter only where there is a task."""
        rooms = load_rooms([short for short in names if short != "research" or tasks_of(self.ctx)])
        for room in rooms:
            self.store.migrate(room.migration_component or f"room:{room.short}", room.migrations)
        return rooms

    def open_rooms(self, before: StationConfig, after: StationConfig) -> None:
        """Open the rooms `after` adds to the room set, with their hooks: the operator enabled them
        (`station set DIR rooms.enabled ...`). A replay applies the same command at the same point,
        so it opens them at the same tick."""
        new = self._build_rooms(room_set_change(before, after))
        hooks = [hook for room in new for hook in room.hooks(self.config)]
        for hook in hooks:
            self.store.migrate(f"hook:{hook.name}", hook.migrations)
        rooms = sorted([*self.ctx.rooms.values(), *new], key=lambda room: room.lobby_order)
        self.ctx.rooms = {room.short: room for room in rooms}
        self.ctx.hooks = sorted([*self.ctx.hooks, *hooks], key=lambda hook: hook.order)

    def prepare_tasks(self, say: Callable[[str], None], warm_up: bool = False) -> None:
        """Build what each research task's scoring needs (its data, normalization bounds) now, before
        the first tick, so that no agent's evaluation waits for it; quick when already built. A task
        that cannot be prepared (a missing file, a bad column) raises ValueError naming it.
        `warm_up`: this process will score (it runs the station), so the scorers pay their
        first-call costs now too."""
        for number, task in tasks_of(self.ctx).items():
            told = lambda step, n=number: say(f"preparing task {n}: {step}")
            try:
                task.prepare(told)
                if warm_up:  # where the station scores: in the task's scoring process, kept for it
                    scoring_process.warm_up(task, told)
            except (ValueError, OSError) as err:
                raise ValueError(f"research task {number} cannot be prepared: {err}") from err
        record_tasks(self.store, tasks_of(self.ctx))  # what readers show of them, without their folders

    @property
    def config(self) -> StationConfig:
        return self.ctx.config  # the operator may change safe values while it runs

    @property
    def dir(self) -> Path:
        return self.store.dir

    @classmethod
    def create(
        cls, directory: str | Path, config: StationConfig, *, recorded: bool = False, branch_seed: int | None = None
    ) -> Station:
        """A new station at tick 1 with its initial population.

        Its config records its room set: every room this code has (less `rooms.disabled`) unless the
        config lists them. `recorded`: the config is one a station already held (a replay's), whose
        room set stays what that station had. `branch_seed`: the station is a branch (`station
        multistart`), its models' sampling seeded with it (recorded: a replay of it keeps it).

        It is built in a temporary sibling directory and renamed into place, so a crash during
        creation never leaves a half-made station behind.
        """
        Texts(config.codex.set, config.codex.texts)  # fail on a bad codex before creating files
        if config.rooms.enabled is None and not recorded:
            rooms = config.rooms.model_copy(update={"enabled": every_room(config.rooms.disabled)})
            config = config.model_copy(update={"rooms": rooms})
        final = absolute(directory)
        if Store.exists(final):
            raise StoreError(f"a station already exists at {final}")
        if final.exists() and any(final.iterdir()):
            raise StoreError(f"{final} exists and is not empty; choose a new directory")
        final.parent.mkdir(parents=True, exist_ok=True)
        building = final.parent / f".{final.name}.creating-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        store = Store.create(building, durability=config.engine.durability)
        try:
            store.migrate("station", CORE_MIGRATIONS)
            with store.transaction():
                store.set_meta("format", FORMAT_VERSION)
                store.set_meta("config", config.model_dump(mode="json"))
                store.set_meta("tick", 1)
                store.set_meta("units", 0)
                store.set_meta("station_status", "Healthy")
                if branch_seed is not None:
                    store.set_meta("branch_seed", branch_seed)
            # an unknown room or evaluator, or a task folder that cannot be read, is refused here
            station = cls(store, config, load_tasks(config.section(ResearchConfig)))
            with store.transaction():
                for spec in config.agents:
                    for _ in range(spec.count):
                        lifecycle.create_agent(station.ctx, spec)
                station.ctx.emit(StationCreated())
                station.ctx.emit(TickStarted())
            station.ctx.models.close()
        except BaseException:
            store.close()
            shutil.rmtree(building, ignore_errors=True)  # a refused config leaves nothing behind
            raise
        store.close()
        if any((building / leftover).exists() for leftover in ("station.db-wal", "station.db-shm")):
            free = shutil.disk_usage(building).free  # a close that could not checkpoint: usually a full disk
            shutil.rmtree(building, ignore_errors=True)
            raise StoreError(
                f"the new station could not be written completely in {final.parent} "
                f"({free >> 10:,} KB free there: is the disk full?); nothing was created"
            )
        if final.exists():
            final.rmdir()  # empty (checked above)
        os.rename(building, final)
        return cls.open(final)

    @classmethod
    def open(cls, directory: str | Path) -> Station:
        """A station to run or to score with: its research tasks built from their evaluators and
        folders (a task folder that is gone or broken is refused in one line naming it)."""
        return cls._open(directory, lambda store, config: open_tasks(config.section(ResearchConfig)))

    @classmethod
    def open_to_read(cls, directory: str | Path) -> Station:
        """A station to read (status, papers, evaluations, the web viewer): its research tasks as the
        station recorded them, so that it opens whatever became of their folders. It never runs."""
        return cls._open(directory, lambda store, config: recorded_tasks(config.section(ResearchConfig), store))

    @classmethod
    def _open(cls, directory: str | Path, tasks: Callable[[Store, StationConfig], ResearchTasks]) -> Station:
        store = Store(directory)
        try:
            store.migrate("station", CORE_MIGRATIONS)
            config = parse_config(store.get_meta("config"), f"{directory}/station.db", stored=True)
            store.db.execute(f"PRAGMA synchronous={'FULL' if config.engine.durability == 'full' else 'NORMAL'}")
            return cls(store, config, tasks(store, config))
        except BaseException:
            store.close()  # a station refused here leaves no connection open
            raise

    def close(self) -> None:
        for hook in self.ctx.hooks:  # background workers (reviews, evaluations) stop with the station
            getattr(hook, "close", lambda: None)()
        self.ctx.models.close()
        self.store.close()
