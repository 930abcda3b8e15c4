"""Opening and creating a station directory: store, config, texts, rooms, hooks, context."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rooms import load_rooms
from rooms.research import load_tasks

from . import lifecycle
from .agents import AgentRegistry
from .budget import Ledger
from .config import StationConfig, parse_config
from .context import Context
from .conversation import Conversations
from .hooks import load_hooks
from .models import ModelPool
from .store import CORE_MIGRATIONS, Store, StoreError, absolute
from .texts import Texts

FORMAT_VERSION = 1


class Station:
    """Everything a running (or inspected) station needs, wired together."""

    def __init__(self, store: Store, config: StationConfig) -> None:
        self.store = store
        self.texts = Texts(config.codex.set, config.codex.texts, style=config.prompt.style)
        self.agents = AgentRegistry(store)
        self.conversations = Conversations(
            store, config.tokens.protected_keywords, cache_bytes=config.engine.conversation_cache_mb << 20
        )
        self.ctx = Context(store, config, self.texts, self.agents, self.conversations)
        self.ctx.tasks = load_tasks(config.research)
        no_research = [] if self.ctx.tasks else ["research"]
        rooms = load_rooms([*config.rooms.disabled, *no_research])
        for room in rooms:
            store.migrate(room.migration_component or f"room:{room.short}", room.migrations)
        self.ctx.rooms = {room.short: room for room in rooms}
        self.ctx.hooks = load_hooks(config, rooms)
        for hook in self.ctx.hooks:
            store.migrate(f"hook:{hook.name}", hook.migrations)
        self.ctx.models = ModelPool(
            Ledger(store.dir, lambda: self.ctx.config), request_processes=config.engine.request_processes
        )

    @property
    def config(self) -> StationConfig:
        return self.ctx.config  # the operator may change safe values while it runs

    @property
    def dir(self) -> Path:
        return self.store.dir

    @classmethod
    def create(cls, directory: str | Path, config: StationConfig) -> Station:
        """A new station at tick 1 with its initial population.

        It is built in a temporary sibling directory and renamed into place, so a crash during
        creation never leaves a half-made station behind.
        """
        Texts(config.codex.set, config.codex.texts)  # fail on a bad codex before creating files
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
            station = cls(store, config)  # an unknown room or evaluator is refused here
            with store.transaction():
                for spec in config.agents:
                    for _ in range(spec.count):
                        lifecycle.create_agent(station.ctx, spec)
                station.ctx.emit("station_created")
                station.ctx.emit("tick_started")
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
        store = Store(directory)
        store.migrate("station", CORE_MIGRATIONS)
        config = parse_config(store.get_meta("config"), f"{directory}/station.db", stored=True)
        store.db.execute(f"PRAGMA synchronous={'FULL' if config.engine.durability == 'full' else 'NORMAL'}")
        return cls(store, config)

    def close(self) -> None:
        for hook in self.ctx.hooks:  # background workers (reviews, evaluations) stop with the station
            getattr(hook, "close", lambda: None)()
        self.ctx.models.close()
        self.store.close()
