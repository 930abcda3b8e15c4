"""Each agent session's persistent conversation, and the pruned view of it a model is sent.

Raw entries are never deleted: pruning (Token Management) only changes what `context()`
returns, so a restarted station rebuilds exactly the context it would have sent.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from station.core.store import Store

HELP_HEADER = "Help Message - "
ENTRY_OVERHEAD = 120  # bytes an Entry costs besides its text (object, list slot)


@dataclass(frozen=True)
class Entry:
    tick: int
    role: str  # "user" (the station) or "assistant" (the agent)
    text: str


class Conversations:
    """Cache of committed entries per session, plus the entries of the open transaction.

    The cache holds at most `cache_bytes` of text (the sessions used least recently leave it
    first, to be read again from the store when needed), so a thousand long conversations are
    not all kept in memory."""

    def __init__(self, store: Store, protected_keywords: list[str], *, cache_bytes: int = 256 << 20) -> None:
        self.store = store
        self.keywords = [HELP_HEADER, *protected_keywords]
        self.cache_bytes = cache_bytes
        self._committed: OrderedDict[int, list[Entry]] = OrderedDict()
        self._sizes: dict[int, int] = {}
        self._cached = 0  # bytes in _committed, by ENTRY_OVERHEAD + text length
        self._pending: dict[int, list[Entry]] = {}

    def entries(self, session: int) -> list[Entry]:
        if session in self._committed:
            self._committed.move_to_end(session)
        else:
            rows = self.store.all("SELECT tick, role, text FROM conversation WHERE session=? ORDER BY id", (session,))
            self._committed[session] = [Entry(r["tick"], r["role"], r["text"]) for r in rows]
            self._grow(session, self._committed[session])
        return self._committed[session] + self._pending.get(session, [])

    def _grow(self, session: int, new: list[Entry]) -> None:
        size = sum(ENTRY_OVERHEAD + len(e.text) for e in new)
        self._sizes[session] = self._sizes.get(session, 0) + size
        self._cached += size

    def _forget(self, session: int) -> None:
        del self._committed[session]
        self._cached -= self._sizes.pop(session, 0)

    def append(self, session: int, tick: int, role: str, text: str) -> None:
        self.entries(session)  # make sure the committed part is loaded first
        self.store.execute(
            "INSERT INTO conversation(session, tick, role, text) VALUES(?, ?, ?, ?)", (session, tick, role, text)
        )
        self._pending.setdefault(session, []).append(Entry(tick, role, text))

    def commit(self) -> None:
        for session, new in self._pending.items():
            self._committed.setdefault(session, []).extend(new)
            self._grow(session, new)
        self._pending.clear()
        # Only here, with nothing pending: a session read again holds exactly its committed rows.
        while self._cached > self.cache_bytes and len(self._committed) > 1:
            self._forget(next(iter(self._committed)))

    def rollback(self) -> None:
        self._pending.clear()

    def retain(self, sessions: set[int]) -> None:
        """Keep only these sessions in memory (the others stay in the store)."""
        for session in list(self._committed):
            if session not in sessions:
                self._forget(session)

    # -- pruning ----------------------------------------------------------------------------
    def protected_ticks(self, session: int) -> set[int]:
        """Ticks in which a station message carries a protected keyword (first-visit help, ...)."""
        return {e.tick for e in self.entries(session) if e.role == "user" and any(k in e.text for k in self.keywords)}

    def context(
        self, session: int, pruned: list[dict[str, Any]], *, through: int | None = None, leave_out: Collection[int] = ()
    ) -> list[dict[str, str]]:
        """The messages a model is sent: pruned ticks removed, their summaries in place.
        `through`, `leave_out`: only the ticks up to `through`, but not those in `leave_out`
        (the older part of the dialogue that a compaction summarises)."""
        entries = self.entries(session)
        if through is not None:
            entries = [e for e in entries if e.tick <= through and e.tick not in leave_out]
        if not pruned:
            return [{"role": e.role, "text": e.text} for e in entries]
        protected = self.protected_ticks(session)
        removed: dict[int, dict[str, Any]] = {}
        for pruned_block in pruned:
            for t in range(pruned_block["ticks"][0], pruned_block["ticks"][1] + 1):
                if t not in protected:
                    removed[t] = pruned_block
        out: list[dict[str, str]] = []
        summarised: set[int] = set()
        for e in entries:
            block = removed.get(e.tick)
            if block is None:
                out.append({"role": e.role, "text": e.text})
                continue
            first = block["ticks"][0]
            if block.get("summary") and first not in summarised:
                summarised.add(first)
                a, b = block.get("compacted") or block["ticks"]  # a compaction names all it summarised
                kind = "Compacted" if block.get("compacted") else "Pruned"
                label = f"{kind} Tick {a}" if a == b else f"{kind} Ticks {a}-{b}"
                out.append({"role": "user", "text": f"System: {label}"})
                out.append({"role": "assistant", "text": f"Summary: {block['summary']}"})
        return out

    def words_per_tick(self, session: int) -> dict[int, int]:
        """Words of every station message and reply in each tick in which the agent replied."""
        counts: dict[int, int] = {}
        replied: set[int] = set()
        for e in self.entries(session):
            counts[e.tick] = counts.get(e.tick, 0) + len(e.text.split())
            if e.role == "assistant":
                replied.add(e.tick)
        return {t: c for t, c in counts.items() if t in replied}
