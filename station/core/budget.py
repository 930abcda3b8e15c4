"""What model calls cost, what has been spent, and the caps that pause a station before a call.

Every call made by this station directory (agents, reviewer, grader, debugger) is written to
the `spend` table the moment it returns, on a connection of its own, so money spent is never
forgotten, even if the process dies before the reply is applied. A replay spends nothing.

Before each call the ledger reserves the call's worst case (the prompt's estimated size plus
`max_output_tokens`); if that could cross a cap the call is not made and the station pauses.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from station.core.config import ModelConfig, Price, StationConfig
from station.core.model_api import BudgetExceeded, Message, Usage, estimate_conversation
from station.core.store import write_lock

# callers that are not agents (the coder and surveyor are workers): only the station caps apply
ROLES = ("reviewer", "grader", "debugger", "coder", "surveyor")
PROMPT_MARGIN = 1.25  # the prompt estimate (about 4 characters a token) may be low for some text


def cost_usd(price: Price | None, usage: Usage) -> float:
    if price is None:
        return 0.0
    cached = usage.cached_input_tokens
    written = usage.cache_write_tokens
    fresh = max(0, usage.input_tokens - cached - written)
    dollars = (
        fresh * price.input
        + cached * (price.cached_input if price.cached_input is not None else price.input)
        + written * (price.cache_write if price.cache_write is not None else price.input)
        + (usage.output_tokens + usage.reasoning_tokens) * price.output
    )
    return dollars / 1_000_000


@dataclass
class Reservation:
    who: str
    tokens: int
    usd: float


class Ledger:
    """Totals per caller, from the `spend` table plus the calls in flight (thread-safe)."""

    def __init__(self, directory: Path | None, config: Callable[[], StationConfig]) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._write_lock: threading.RLock | contextlib.nullcontext[None] = contextlib.nullcontext()
        self.tokens: dict[str, int] = {}
        self.usd: dict[str, float] = {}
        if directory is not None:
            self._db = sqlite3.connect(
                Path(directory) / "station.db", isolation_level=None, timeout=60.0, check_same_thread=False
            )
            # as durable as the station's own writes (engine.durability): FULL would fsync every call's row
            full = config().engine.durability == "full"
            self._db.execute(f"PRAGMA synchronous={'FULL' if full else 'NORMAL'}")
            self._write_lock = write_lock(Path(directory) / "station.db")
            for who, tokens, usd in self._db.execute(  # the running totals per caller (store.py's v5)
                "SELECT who, input_tokens + output_tokens + reasoning_tokens, cost_usd FROM spend_totals"
            ):
                self.tokens[who], self.usd[who] = int(tokens or 0), float(usd or 0.0)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- totals ---------------------------------------------------------------------------
    def station_totals(self) -> tuple[int, float]:
        return sum(self.tokens.values()), sum(self.usd.values())

    # -- before and after a call ----------------------------------------------------------
    def reserve(self, who: str, model: ModelConfig, messages: list[Message], system: str | None) -> Reservation:
        cfg = self.config()
        tokens = int(estimate_conversation(messages, system) * PROMPT_MARGIN) + model.max_output_tokens
        worst = cost_usd(
            cfg.prices.get(model.name),
            Usage(input_tokens=tokens - model.max_output_tokens, output_tokens=model.max_output_tokens),
        )
        with self._lock:
            problem = self._crossing(cfg, who, tokens, worst, model.name)
            if problem:
                raise BudgetExceeded(problem)
            self._add(who, tokens, worst)
        return Reservation(who, tokens, worst)

    def settle(
        self,
        reservation: Reservation,
        model: ModelConfig,
        usage: Usage | None,
        *,
        latency_s: float | None = None,
        retries: int = 0,
    ) -> float:
        """Replace the reservation by what the call really used; returns its cost."""
        spent = cost_usd(self.config().prices.get(model.name), usage) if usage is not None else 0.0
        tokens = (usage.input_tokens + usage.output_tokens + usage.reasoning_tokens) if usage is not None else 0
        with self._write_lock, self._lock:  # in this order, as a unit that makes a call inside its transaction
            self._add(reservation.who, tokens - reservation.tokens, spent - reservation.usd)
            if usage is not None and self._db is not None:
                tick = self._db.execute("SELECT value FROM meta WHERE key='tick'").fetchone()
                self._db.execute(
                    "INSERT INTO spend(at, tick, who, model, provider, input_tokens, cached_input_tokens, "
                    "cache_write_tokens, output_tokens, reasoning_tokens, cost_usd, latency_s, retries) "
                    "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        time.time(),
                        int(tick[0]) if tick else None,
                        reservation.who,
                        model.name,
                        model.provider,
                        usage.input_tokens,
                        usage.cached_input_tokens,
                        usage.cache_write_tokens,
                        usage.output_tokens,
                        usage.reasoning_tokens,
                        spent,
                        latency_s,
                        retries,
                    ),
                )
        return spent

    def record_switch(self, switch: Any) -> None:
        """A model's calls moved to another endpoint (models/fallback.py's Switch): kept in
        `endpoint_switches`, made at the first switch (stations without backups never have it).
        Bookkeeping like spend: a replay calls no endpoint and records none."""
        if self._db is None:
            return
        with self._write_lock, self._lock:
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS endpoint_switches (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, "
                "tick INTEGER, provider TEXT NOT NULL, model TEXT NOT NULL, endpoint INTEGER NOT NULL, "
                "base_url TEXT NOT NULL, reason TEXT NOT NULL)"
            )
            tick = self._db.execute("SELECT value FROM meta WHERE key='tick'").fetchone()
            self._db.execute(
                "INSERT INTO endpoint_switches(at, tick, provider, model, endpoint, base_url, reason) "
                "VALUES(?,?,?,?,?,?,?)",
                (
                    time.time(),
                    int(tick[0]) if tick else None,
                    switch.provider,
                    switch.model,
                    switch.endpoint,
                    switch.base_url,
                    switch.reason,
                ),
            )

    def _add(self, who: str, tokens: int, usd: float) -> None:
        self.tokens[who] = self.tokens.get(who, 0) + tokens
        self.usd[who] = self.usd.get(who, 0.0) + usd

    def _crossing(self, cfg: StationConfig, who: str, tokens: int, usd: float, model: str) -> str | None:
        caps = cfg.budget
        station_tokens, station_usd = self.station_totals()
        call = f"the next call ({who}, {model}) may use up to {tokens:,} tokens"
        if caps.station_usd is not None and station_usd + usd > caps.station_usd:
            return (
                f"the station's money budget would be crossed: spent ${station_usd:.4f} of "
                f"${caps.station_usd:.4f}, and {call} costing up to ${usd:.4f}. Raise budget.station_usd "
                "(station set DIR budget.station_usd AMOUNT) to go on"
            )
        if caps.station_tokens is not None and station_tokens + tokens > caps.station_tokens:
            return (
                f"the station's token budget would be crossed: used {station_tokens:,} of "
                f"{caps.station_tokens:,}, and {call}. Raise budget.station_tokens to go on"
            )
        if who in ROLES:
            return None
        mine_tokens, mine_usd = self.tokens.get(who, 0), self.usd.get(who, 0.0)
        if caps.agent_usd is not None and mine_usd + usd > caps.agent_usd:
            return (
                f"{who}'s money budget would be crossed: spent ${mine_usd:.4f} of ${caps.agent_usd:.4f}, "
                f"and {call} costing up to ${usd:.4f}. Raise budget.agent_usd, or end the agent "
                "(station end-agent DIR NAME), to go on"
            )
        if caps.agent_tokens is not None and mine_tokens + tokens > caps.agent_tokens:
            return (
                f"{who}'s token budget would be crossed: used {mine_tokens:,} of {caps.agent_tokens:,}, "
                f"and {call}. Raise budget.agent_tokens, or end the agent, to go on"
            )
        return None
