"""The Stagnation Protocol (spec research §5): when a research task stops improving, tell the agents.

Each research task is watched on its own. Its *best* is the highest sort key (the evaluation's
`sort_key` JSON list, compared lexicographically, or `[score]` when there is none) among its
delivered successful evaluations (`status='finished'` with a score; System baselines count).
The tick of its last improvement is the `finished_tick` of the evaluation that set the best,
i.e. when that result became known; a task with no result yet counts from the submission tick
of its first evaluation, or from tick 1 when it has none.

States of a task (table `stagnation_state`, one row per task; every transition is also
appended to `stagnation_history` and emitted as a `stagnation_changed` event):

  Healthy          -> `threshold_ticks` since the last improvement: Protocol I is broadcast,
                      the task enters Stagnation.
  Stagnation       -> `deep_threshold_ticks` more without a new best: Deep Stagnation under a
                      fresh code name; Protocol II is broadcast and appended to *that* task's
                      spec (a `research_addenda` row labelled "Stagnation Protocol II: <name>").
  Deep Stagnation  -> after `deep_threshold_ticks` more without progress: the next code name
                      (the old addendum is marked removed, a new one added, Protocol II sent
                      again under the new name).
  any non-Healthy  -> a new best for the task: congratulations are broadcast, the addenda are
                      removed, the task is Healthy again.

The cycling fix (`stagnation.breakthrough`). The reference only counted a new overall top
score as progress, so under Deep Stagnation, where Protocol II asks everyone to restart from a
fresh baseline tagged with the code name and to treat the best *tagged* score as the new state
of the art, the tagged work could never count: the protocol cycled to a new code name every
`deep_threshold_ticks` ticks while that work was improving. With `breakthrough: tag` (the
default), while a task is in Deep Stagnation under code name T, an improvement of the best
score among the task's evaluations tagged T (`evaluation_tags`) also counts: it restarts the
deep-stagnation clock (from the delivery tick of that result), so no new code name is issued
while the tagged track keeps improving; only a new overall best ends the protocol. With
`breakthrough: global` only a new overall best counts, and the protocol cycles as the
reference did.

Code names come from a fixed list in a fixed order; a name is skipped if any task has already
used it or if agents already tag evaluations with it (so the tagged track starts empty). When
the list is exhausted the names come round again with a suffix: "quasar-2", ..., then "-3".

Other fixes over the reference: tasks are not mixed; the state lives in the store, not in
memory, so a restart or a replay continues the protocol where it was; the addendum goes to the
stagnating task, not always task 1; messages name the task when the station has several.

The hook reacts to `tick_started`: the tick counter has just advanced (as in the reference,
which checks after the increment), respawned agents are already back so they get the
broadcast, and every result delivered during the previous tick is in the store whatever the
order of hooks (results are applied before turns and at `tick_ending`, hooks/evaluations.py).
The broadcasts are read in the turns of the new tick. It runs inside the engine's end-of-tick
unit, reads only the store and the tick, and uses no clock or randomness, so a replay repeats
it exactly. The store meta `station_status` (shown in prompts and by `station status`) follows
the worst state across tasks.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from rooms.research.config import StagnationConfig
from rooms.research.events import StagnationChanged, StagnationTagProgress
from rooms.research.tasks import tasks_of
from station.core.context import Context, Hook
from station.core.events import TickStarted, on
from station.core.store import dumps

from .store import DELIVERED_FIRST, best_evaluation

HEALTHY, STAGNATION, DEEP = "Healthy", "Stagnation", "Deep Stagnation"
SEVERITY = {HEALTHY: 0, STAGNATION: 1, DEEP: 2}
ADDENDUM_LABEL = "Stagnation Protocol II: "
MESSAGE_KIND = "stagnation"

# Our own list of code names (nature and astronomy), used in this order.
CODE_NAMES = (
    "quasar",
    "pulsar",
    "comet",
    "meteor",
    "corona",
    "solstice",
    "equinox",
    "orion",
    "lyra",
    "vega",
    "sirius",
    "altair",
    "polaris",
    "umbra",
    "parallax",
    "magnetar",
    "redshift",
    "nova",
    "perigee",
    "zodiac",
    "fjord",
    "monsoon",
    "estuary",
    "caldera",
    "atoll",
    "lagoon",
    "moraine",
    "steppe",
    "prairie",
    "geyser",
    "lichen",
    "sequoia",
    "willow",
    "heron",
    "falcon",
    "otter",
    "lynx",
    "kestrel",
    "basalt",
    "granite",
    "obsidian",
    "quartz",
    "amber",
    "zephyr",
    "cirrus",
    "nimbus",
    "tide",
    "boreal",
    "cedar",
    "juniper",
)

MIGRATIONS = [
    """
    CREATE TABLE stagnation_state (
        task TEXT PRIMARY KEY,             -- research task id ("1", "2", ...)
        status TEXT NOT NULL,              -- Healthy / Stagnation / Deep Stagnation
        status_tick INTEGER NOT NULL,      -- tick the status (or the current code name) began
        clock_tick INTEGER NOT NULL,       -- tick the next escalation is counted from
        tag TEXT,                          -- the code name while in Deep Stagnation
        best TEXT,                         -- JSON sort key of the task's best delivered result
        best_tick INTEGER NOT NULL,        -- tick of the last improvement (delivery tick)
        tag_best TEXT,                     -- JSON sort key of the best result tagged with `tag`
        tag_best_tick INTEGER              -- delivery tick of the last tagged improvement
    );
    CREATE TABLE stagnation_history (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        task TEXT NOT NULL,
        status TEXT NOT NULL,
        tag TEXT,
        tick INTEGER NOT NULL
    );
    CREATE INDEX stagnation_history_tag ON stagnation_history(tag);
    """
]

Key = tuple[float, ...]


@dataclass
class Best:
    key: Key
    tick: int  # the tick the result was delivered


@dataclass
class State:
    task: str
    status: str
    status_tick: int
    clock_tick: int
    tag: str | None
    best: Key | None
    best_tick: int
    tag_best: Key | None
    tag_best_tick: int | None

    def row(self) -> tuple[Any, ...]:
        return (
            self.status,
            self.status_tick,
            self.clock_tick,
            self.tag,
            _dump_key(self.best),
            self.best_tick,
            _dump_key(self.tag_best),
            self.tag_best_tick,
            self.task,
        )


class Stagnation(Hook):
    name = "stagnation"
    order = 60
    migrations = MIGRATIONS

    @on(TickStarted)
    def watch(self, ctx: Context, agent: str | None, event: TickStarted) -> None:
        if not ctx.config.section(StagnationConfig).enabled or not tasks_of(ctx) or ctx.room("research") is None:
            return
        for task in sorted(tasks_of(ctx), key=_task_order):
            self._check(ctx, task)
        self._sync_station_status(ctx)

    # -- one task -------------------------------------------------------------------------
    def _check(self, ctx: Context, task: str) -> None:
        cfg, now = ctx.config.section(StagnationConfig), ctx.tick
        best = best_result(ctx.store, task)
        state = load_state(ctx.store, task)
        if state is None:
            start = best.tick if best else _first_submission_tick(ctx.store, task)
            state = State(task, HEALTHY, now, now, None, best.key if best else None, start, None, None)
            ctx.store.execute(
                "INSERT INTO stagnation_state(status, status_tick, clock_tick, tag, best, best_tick, tag_best, "
                "tag_best_tick, task) VALUES(?,?,?,?,?,?,?,?,?)",
                state.row(),
            )
            return
        before = state.row()

        if best is not None and (state.best is None or best.key > state.best):
            state.best, state.best_tick = best.key, max(best.tick, state.best_tick)
            if state.status != HEALTHY:
                self._breakthrough(ctx, state)
        elif best is None and state.best is None:
            state.best_tick = _first_submission_tick(ctx.store, task)
        elif state.best is not None and (best is None or best.key < state.best):
            # A delivered result was withdrawn (an operator's correction): lower the mark, no progress.
            state.best = best.key if best else None

        if state.status == HEALTHY:
            if now - state.best_tick >= cfg.threshold_ticks:
                self._enter_stagnation(ctx, state)
        elif state.status == STAGNATION:
            if now - state.clock_tick >= cfg.deep_threshold_ticks:
                self._enter_deep(ctx, state)
        elif state.status == DEEP:
            if cfg.breakthrough == "tag" and state.tag:
                self._tagged_progress(ctx, state)
            if now - state.clock_tick >= cfg.deep_threshold_ticks:
                self._enter_deep(ctx, state)

        if state.row() != before:
            ctx.store.execute(
                "UPDATE stagnation_state SET status=?, status_tick=?, clock_tick=?, tag=?, best=?, best_tick=?, "
                "tag_best=?, tag_best_tick=? WHERE task=?",
                state.row(),
            )

    def _tagged_progress(self, ctx: Context, state: State) -> None:
        tagged = best_result(ctx.store, state.task, state.tag)
        if tagged is None or (state.tag_best is not None and tagged.key <= state.tag_best):
            return
        state.tag_best, state.tag_best_tick = tagged.key, tagged.tick
        state.clock_tick = max(state.clock_tick, tagged.tick)
        ctx.emit(StagnationTagProgress(task=state.task, tag=state.tag, best=list(tagged.key)))

    # -- transitions ----------------------------------------------------------------------
    def _enter_stagnation(self, ctx: Context, state: State) -> None:
        text = ctx.texts.render(
            "stagnation_protocol_1", about=_about(ctx, state.task), ticks=ctx.tick - state.best_tick
        )
        self._transition(ctx, state, STAGNATION, None, _tidy(text))

    def _enter_deep(self, ctx: Context, state: State) -> None:
        _remove_addenda(ctx, state.task)
        tag = next_code_name(ctx.store)
        message = ctx.texts.render("stagnation_protocol_2", about=_about(ctx, state.task), tag=tag)
        addendum = ctx.texts.render("stagnation_protocol_2", about="", tag=tag)
        ctx.store.execute(
            "INSERT INTO research_addenda(task, tick, label, text) VALUES(?,?,?,?)",
            (state.task, ctx.tick, ADDENDUM_LABEL + tag, _tidy(addendum)),
        )
        tagged = best_result(ctx.store, state.task, tag)  # normally none: the name is fresh
        state.tag_best, state.tag_best_tick = (tagged.key if tagged else None), None
        self._transition(ctx, state, DEEP, tag, _tidy(message))

    def _breakthrough(self, ctx: Context, state: State) -> None:
        _remove_addenda(ctx, state.task)
        text = ctx.texts.render("stagnation_congratulations", about=_about(ctx, state.task))
        state.tag_best, state.tag_best_tick = None, None
        self._transition(ctx, state, HEALTHY, None, _tidy(text))

    def _transition(self, ctx: Context, state: State, status: str, tag: str | None, text: str) -> None:
        now = ctx.tick
        state.status, state.tag, state.status_tick, state.clock_tick = status, tag, now, now
        ctx.store.execute(
            "INSERT INTO stagnation_history(task, status, tag, tick) VALUES(?,?,?,?)", (state.task, status, tag, now)
        )
        sent = ctx.broadcast(text, MESSAGE_KIND, recursive_only=True)
        ctx.emit(StagnationChanged(task=state.task, status=status, tag=tag, recipients=len(sent)))

    def _sync_station_status(self, ctx: Context) -> None:
        states = [s for s in (load_state(ctx.store, t) for t in sorted(tasks_of(ctx), key=_task_order)) if s]
        status = station_status(states)
        if ctx.store.get_meta("station_status") != status:
            ctx.store.set_meta("station_status", status)


# -- reading the store ------------------------------------------------------------------------
def best_result(store: Any, task: str, tag: str | None = None) -> Best | None:
    """The task's best delivered successful result (optionally among those tagged `tag`), ranked as
    the leaderboard ranks them; of equal results, the first delivered reached the top."""
    where, params = "e.task = ?", [task]
    if tag is not None:
        where, params = where + " AND e.id IN (SELECT evaluation FROM evaluation_tags WHERE tag = ?)", [task, tag]
    row = best_evaluation(store.all, where, tuple(params), DELIVERED_FIRST)
    if row is None:
        return None
    return Best(sort_key(row["sort_key"], row["score"]), int(row["finished_tick"] or row["tick"]))


def sort_key(raw: str | None, score: float) -> Key:
    if raw:
        try:
            value = json.loads(raw)
            if isinstance(value, list) and value:
                return tuple(float(x) for x in value)
        except (ValueError, TypeError):
            pass
    return (float(score),)


def load_state(store: Any, task: str) -> State | None:
    row = store.one("SELECT * FROM stagnation_state WHERE task=?", (task,))
    if row is None:
        return None
    return State(
        row["task"],
        row["status"],
        row["status_tick"],
        row["clock_tick"],
        row["tag"],
        _load_key(row["best"]),
        row["best_tick"],
        _load_key(row["tag_best"]),
        row["tag_best_tick"],
    )


def next_code_name(store: Any) -> str:
    """The first name not used by any task's Deep Stagnation nor as an evaluation tag."""
    used = {r[0] for r in store.all("SELECT DISTINCT tag FROM stagnation_history WHERE tag IS NOT NULL")}
    round_ = 1
    while True:
        for name in CODE_NAMES:
            tag = name if round_ == 1 else f"{name}-{round_}"
            if tag not in used and store.one("SELECT 1 FROM evaluation_tags WHERE tag=? LIMIT 1", (tag,)) is None:
                return tag
        round_ += 1


def station_status(states: list[State]) -> str:
    """The worst state across tasks, as shown to agents and by `station status`."""
    worst = max((SEVERITY.get(s.status, 0) for s in states), default=0)
    if worst == SEVERITY[DEEP]:
        return f"{DEEP} - " + ", ".join(s.tag or "?" for s in states if s.status == DEEP)
    return STAGNATION if worst == SEVERITY[STAGNATION] else HEALTHY


def _first_submission_tick(store: Any, task: str) -> int:
    first = store.scalar("SELECT MIN(tick) FROM evaluations WHERE task=?", (task,))
    return max(1, int(first)) if first is not None else 1


def _remove_addenda(ctx: Context, task: str) -> None:
    ctx.store.execute(
        "UPDATE research_addenda SET removed_tick=? WHERE task=? AND removed_tick IS NULL AND label LIKE ?",
        (ctx.tick, task, ADDENDUM_LABEL + "%"),
    )


def _about(ctx: Context, task: str) -> str:
    """Which task a message is about; empty when the station has only one."""
    if len(tasks_of(ctx)) < 2:
        return ""
    title = getattr(tasks_of(ctx)[task], "title", "") or getattr(tasks_of(ctx)[task], "kind", "")
    return ctx.texts.render("stagnation_about", task=task, title=title)


def _tidy(text: str) -> str:
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _task_order(task: str) -> tuple[int, str]:
    return (int(task), task) if task.isdigit() else (1 << 62, task)


def _dump_key(key: Key | None) -> str | None:
    return None if key is None else dumps(list(key))


def _load_key(raw: str | None) -> Key | None:
    return None if raw is None else tuple(float(x) for x in json.loads(raw))
