"""The station's budget caps over a whole multistart: the start's spend once, plus what every branch
spent after the fork.

Why the multistart watches the caps itself (rather than giving each branch a cap of its own, the
station cap minus the others' spend): the branches are separate processes, each with its own SQLite
file, and a cap shared live would put a cross-process reservation on every model call. Instead each
branch carries the start's spend (one row in its `spend` table, made with the fork), so its own
Ledger already pauses it before the start and itself could cross a cap; and the multistart, which
polls its branches anyway, sums their spend (read-only) at every poll and stops them all cleanly
(SIGINT: each commits its turn in flight) once the sum reaches a cap. What can pass the cap is at
most the calls that return within one poll, each bounded by its own reservation.

The spend carried into a station is an ordinary `spend` row under the caller CARRIED: bookkeeping, not
world (a replay spends nothing, `canonical_dump` skips the table), counted by the Ledger when the station
opens (station/core is untouched: nothing is added to the turn path), shown by `station status` as a
caller of its own.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `station --help` imports no pydantic
    from station.core.config import BudgetConfig

CARRIED = "multistart (spent before the fork, and by the branches not chosen)"


@dataclass(frozen=True)
class Spent:
    tokens: int = 0
    usd: float = 0.0

    def __add__(self, other: Spent) -> Spent:
        return Spent(self.tokens + other.tokens, self.usd + other.usd)

    def __sub__(self, other: Spent) -> Spent:
        return Spent(self.tokens - other.tokens, self.usd - other.usd)


def spent(directory: Path) -> Spent:
    """Everything a station's directory counts against its caps (as its Ledger does), read-only: safe
    while the station runs."""
    conn = sqlite3.connect(f"file:{directory / 'station.db'}?mode=ro", uri=True, timeout=60.0)
    try:
        row = conn.execute(
            "SELECT COALESCE(SUM(input_tokens + output_tokens + reasoning_tokens), 0), COALESCE(SUM(cost_usd), 0) "
            "FROM spend_totals"
        ).fetchone()
    finally:
        conn.close()
    return Spent(int(row[0]), float(row[1]))


def carry(directory: Path, amount: Spent) -> None:
    """Count `amount` in a station that is not running (a fork or a copy being built)."""
    if amount == Spent():
        return  # nothing to count: no row (`station status` would show a caller that spent nothing)
    conn = sqlite3.connect(directory / "station.db", isolation_level=None, timeout=60.0)
    try:
        tick = conn.execute("SELECT value FROM meta WHERE key='tick'").fetchone()
        conn.execute(
            "INSERT INTO spend(at, tick, who, model, provider, input_tokens, cached_input_tokens, cache_write_tokens, "
            "output_tokens, reasoning_tokens, cost_usd) VALUES(?,?,?,'-','multistart',?,0,0,0,0,?)",
            (time.time(), int(tick[0]) if tick else None, CARRIED, amount.tokens, amount.usd),
        )
    finally:
        conn.close()


def cap_reached(caps: BudgetConfig, total: Spent) -> str | None:
    """The message when every branch's spend together reaches a station cap, else None."""
    if caps.station_usd is not None and total.usd >= caps.station_usd:
        return (
            f"the branches together reached the station's money budget: ${total.usd:.4f} of ${caps.station_usd:.4f} "
            "(budget.station_usd, counting the start's spend once)"
        )
    if caps.station_tokens is not None and total.tokens >= caps.station_tokens:
        return (
            f"the branches together reached the station's token budget: {total.tokens:,} of "
            f"{caps.station_tokens:,} tokens (budget.station_tokens, counting the start's spend once)"
        )
    return None
