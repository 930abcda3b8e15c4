"""The tick loop: one committed unit of work at a time (an agent's turn, or the end of a tick).

Each unit runs inside one transaction. When it needs an input from outside (a model reply,
a grader's verdict) that is not recorded yet, the transaction is rolled back, the input is
fetched and committed on its own, and the unit runs again from the start; the second time
it finds the input. So a reply is always stored before it is applied, a crash loses at most
the unit in flight, no write lock is held during a model call, and replaying the recorded
inputs rebuilds the same world.

Progress within a tick is the set of sessions that have a committed turn at that tick
(not an index into the turn order, which shifts when agents come and go).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from station.core import commands, lifecycle
from station.core.agents import Agent
from station.core.context import NeedInput, WaitInterrupted, request_hash
from station.core.context import StationPaused as StationPaused  # re-exported: the apps catch it from here
from station.core.events import TickEnding, TickStarted, TurnFinished, TurnStarted
from station.core.model_api import (
    INTERRUPTED,
    OVERFLOW,
    AgentModel,
    BudgetExceeded,
    Model,
    ModelError,
    PendingReply,
    Reply,
    Usage,
)
from station.core.prompt import compose, system_prompt
from station.core.store import Store, dumps
from station.core.turn import TurnLog, cut_notice, execute_reply

if TYPE_CHECKING:
    from station.apps.world import Station  # the engine is handed a built station; it builds none


MAX_OTHER_THREADS = 256  # inputs whose model is not known (verdicts, evaluation results) fetched at once
# A concurrent tick's prompts are committed this many at a time; where calls are sent ahead, each
# batch's calls go out as it commits, while the next batch is built.
PROMPT_BATCH = 32


@dataclass
class Progress:
    tick: int
    kind: str  # "turn" or "tick"
    agent: str | None = None
    room: str | None = None
    note: str | None = None  # kind "wait": what the station is waiting for


def pause_message(who: str | None, err: Exception, config: Any = None, directory: Any = None) -> str:
    """What the operator reads when a model call stops the station; nothing is lost either way.
    With the station's config and directory, a permanent failure names the `station set` that fixes it."""
    whose = f" for {who}" if who else ""
    if isinstance(err, BudgetExceeded):
        return f"budget: {err}. Nothing was lost; the call{whose} is made when the station runs again."
    assert isinstance(err, ModelError)
    if err.permanent:
        fix = commands.model_fix(config, getattr(err, "config", None), directory, who)
        return (
            f"a model call{whose} failed and retrying cannot help: {err}. {fix}, then run the station "
            "again; the turn starts over and nothing is lost."
        )
    return (
        f"a model call{whose} kept failing: {err}. Run the station again to retry; the turn starts over "
        "and nothing is lost."
    )


class SentInput:
    """A model call sent ahead (request processes), as `_fetch` waits for it: like a future of
    (payload, latency), whose payload is made, and spend booked, by the engine's thread."""

    def __init__(self, call: PendingReply, payload: Callable[[Callable[[], Reply]], dict[str, Any]]) -> None:
        self.call, self.payload = call, payload
        self.began = self.ended = time.perf_counter()
        call.future.add_done_callback(self._ended)

    def _ended(self, _: Any) -> None:
        self.ended = time.perf_counter()

    def done(self) -> bool:
        return self.call.future.done()

    def exception(self) -> BaseException | None:
        return self.call.future.exception()

    def result(self) -> tuple[dict[str, Any], float]:
        return self.payload(self.call.reply), self.ended - self.began


@dataclass
class Answers:
    """Inputs asked for together, taken (recorded) in the order asked as they come."""

    jobs: list[NeedInput]
    futures: list[Any]  # Future or SentInput of (payload, latency), one per job
    taken: int = 0  # jobs[:taken] are recorded, or failed
    failure: BaseException | None = None
    index: dict[str, int] = field(default_factory=dict)  # key -> its job's place

    def __post_init__(self) -> None:
        self.index = {job.key: i for i, job in enumerate(self.jobs)}

    def extend(self, jobs: list[NeedInput], futures: list[Any]) -> None:
        """More inputs asked for, taken after those already asked."""
        self.index.update((job.key, len(self.jobs) + i) for i, job in enumerate(jobs))
        self.jobs.extend(jobs)
        self.futures.extend(futures)

    @property
    def all_taken(self) -> bool:
        return self.taken == len(self.jobs)


@dataclass
class TurnUsage:
    """The model calls of one turn (the main reply and any exchange steps), added up."""

    calls: list[Reply] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)  # as measured live (a replay has none)

    def columns(self) -> tuple[Any, ...]:
        u = Usage()
        for r in self.calls:
            for name in ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_tokens"):
                setattr(u, name, getattr(u, name) + getattr(r.usage, name))
        latency = self.latencies
        costs = [r.cost_usd for r in self.calls if r.cost_usd is not None]
        return (
            u.input_tokens,
            u.cached_input_tokens,
            u.output_tokens,
            u.reasoning_tokens,
            round(sum(latency), 3) if latency else None,
            round(sum(costs), 8) if costs else None,
        )


class Engine:
    def __init__(
        self,
        station: Station,
        *,
        replay_source: Store | None = None,
        on_progress: Callable[[Progress], None] | None = None,
    ) -> None:
        self.station = station
        self.ctx = station.ctx
        self.store = station.store
        self.store.keep_meta()  # the running engine is the one writer of meta (commands come through it)
        self.ctx.replay_source = replay_source
        self.ctx.replay_strict = replay_source is not None
        self._replayed_commands = commands.recorded_by_point(replay_source) if replay_source else None
        self.on_progress = on_progress or (lambda p: None)
        self.stop = threading.Event()
        self.ctx.stop_event = self.stop
        self.ctx.on_wait = lambda text: self.on_progress(Progress(self.ctx.tick, "wait", note=text))
        self.ctx.models.stop = self.stop
        self.ctx.models.on_wait = self.ctx.report_wait
        self._done_tick = -1
        self._done: set[int] = set()
        self._finished: int | None = None  # the session whose turn the unit in flight wrote: done once it commits
        self._tick_just_ended = False
        self._scale = 1.0
        self._prefetched = -1  # the tick whose concurrent replies were fetched by this process
        self._in_flight: Answers | None = None  # this tick's replies sent ahead, not all recorded yet

    # -- the loop -------------------------------------------------------------------------
    def run(self, *, ticks: int | None = None, until_tick: int | None = None) -> str:
        """Run units until told to stop; returns why it stopped."""
        try:
            return self._run(ticks, until_tick)
        finally:
            self._keep_answers_in_flight()

    def _run(self, ticks: int | None, until_tick: int | None) -> str:
        start = self.ctx.tick
        last = until_tick if until_tick is not None else (start + ticks - 1 if ticks is not None else None)
        while not self.stop.is_set():
            if self._apply_operator_commands():
                return "paused by the operator"
            if last is not None and self.ctx.tick > last:
                return f"finished tick {last}"
            try:
                if not self.step():
                    return "no active agents are left"
            except WaitInterrupted as err:
                return str(err)
            if self._tick_just_ended and self.ctx.config.operator.pause_on_human_request:
                waiting = [w for room in self.ctx.rooms.values() for w in room.awaiting_operator(self.ctx)]
                if waiting:
                    return (
                        "paused at the end of a tick: waiting for the operator to answer "
                        + ", ".join(waiting)
                        + " (station answer DIR ID TEXT; running again resumes)"
                    )
        return "stopped"

    def step(self) -> bool:
        """Run one unit of work. False when nothing can happen (no agents at all)."""
        self._tick_just_ended = False
        agent = self._next_agent()
        if agent is not None:
            if self.ctx.config.turns == "concurrent" and self._prefetched != self.ctx.tick:
                if self.store.get_meta("prompts_tick") != self.ctx.tick:
                    self._build_tick_prompts()
                self._prefetch()  # the replies still missing (not sent ahead, or lost to a restart)
                self._prefetched = self.ctx.tick
                agent = self._next_agent()
                if agent is None:
                    return True
            self._take_in_flight(f"reply/{self.ctx.tick}/{agent.session}/0")  # also before a sequential fetch
            if self.ctx.config.turns == "sequential":
                self._prepare_turn(agent)
            self._unit(lambda: self._turn(agent.name))
            self.on_progress(Progress(self.ctx.tick, "turn", agent.name, agent.location))
            return True
        self._take_in_flight(None)  # replies of agents whose sessions ended this tick
        if not self.ctx.agents.active_count() and not self._respawns_pending():
            return False
        self._unit(self._advance_tick)
        self._tick_just_ended = True
        self._maybe_backup()
        self.on_progress(Progress(self.ctx.tick - 1, "tick"))
        return True

    def _maybe_backup(self) -> None:
        """Every N ticks, a copy labelled with the tick it resumes at; the oldest copies go."""
        cfg = self.ctx.config.engine
        finished = self.ctx.tick - 1
        if not cfg.backup_every_ticks or finished % cfg.backup_every_ticks:
            return
        folder = self.station.dir / "backups"
        self.store.backup(folder / f"resume_at_tick_{self.ctx.tick:07d}.db")
        for old in sorted(folder.glob("resume_at_tick_*.db"))[: -cfg.backups_kept]:
            old.unlink()

    def _unit(self, body: Callable[[], None], *, counted: bool = True) -> None:
        """Run `body` in one transaction until it commits. `counted`: the unit is one of the points
        at which operator commands are applied (a turn's prompt, made apart from it, is not)."""
        while True:
            try:
                with self.store.transaction():
                    body()
                    self.ctx.agents.flush()
                    if counted:
                        self.store.set_meta("units", self.store.get_meta("units", 0) + 1)
            except NeedInput as need:
                self._rolled_back()
                self._fetch(need.needs)  # outside any transaction: may take minutes
                continue
            except BaseException:
                self._rolled_back()
                raise
            self.ctx.conversations.commit()
            self.ctx.agents.committed()  # flushed above: the cached records are the committed rows
            if self._finished is not None:
                self._done.add(self._finished)
                self._finished = None
            return

    def _produce(self, who: str | None, produce: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Fetch one input; a model failure or a budget cap becomes an operator pause."""
        try:
            return produce()
        except (ModelError, BudgetExceeded) as err:
            raise self._stopping(who, err) from err

    def _stopping(self, who: str | None, err: BaseException) -> BaseException:
        """What a failed input stops the engine with: an operator pause, or an interruption."""
        if isinstance(err, ModelError) and err.kind == INTERRUPTED:
            return WaitInterrupted(f"stopped while a model call waited to retry ({who})")
        if isinstance(err, ModelError):
            return StationPaused(pause_message(who, err, self.ctx.config, self.station.dir))
        if isinstance(err, BudgetExceeded):
            return StationPaused(pause_message(who, err))
        return err

    def _rolled_back(self) -> None:
        self.ctx.agents.rolled_back()
        self.ctx.conversations.rollback()
        self._finished = None

    # -- who acts next --------------------------------------------------------------------
    def _next_agent(self) -> Agent | None:
        tick = self.ctx.tick
        if self._done_tick != tick:
            self._done = {r[0] for r in self.store.all("SELECT session FROM turns WHERE tick=?", (tick,))}
            self._done_tick = tick
        for session, name in self.ctx.agents.turn_order():
            if session not in self._done:
                return self.ctx.agents.get(name)
        return None

    def _respawns_pending(self) -> bool:
        return self.store.one("SELECT 1 FROM agents WHERE respawn_pending=1") is not None

    # -- one turn -------------------------------------------------------------------------
    def _turn(self, name: str) -> None:
        """One agent's turn, as one unit. Kept whole: it is the turn of DESIGN.md's "one turn, as
        data" (prompt, reply, actions, internal exchanges, commit), step for step."""
        ctx = self.ctx
        agent = ctx.agents.get(name)
        assert agent is not None
        prompt = self._prebuilt_prompt(agent)
        if ctx.config.turns == "sequential":  # handed over by _prepare_turn: the turn's row keeps the prompt
            self.store.execute("DELETE FROM turn_prompts WHERE tick=? AND session=?", (ctx.tick, agent.session))
        if agent.flags.get("end_requested"):
            lifecycle.end_session(
                ctx, agent, lifecycle.OPERATOR, respawn_wanted=ctx.config.lifecycle.respawn_after_operator_end
            )
            return
        if agent.max_age is not None and agent.age(ctx.tick) >= agent.max_age:
            lifecycle.end_session(ctx, agent, lifecycle.LIFE_LIMIT)
            return
        started = time.time()
        if prompt is None:
            ctx.emit(TurnStarted(), agent.name)
            prompt = compose(ctx, agent)
        model = ctx.models.get(agent.model)
        usage = TurnUsage()
        reply = self._exchange(agent, 0, prompt, model, usage)
        internal: list[dict[str, str]] = []
        if reply.overflow:
            log = TurnLog()
            log.log(agent.location, "Your conversation no longer fits the model's context window; your session ended.")
            lifecycle.end_session(ctx, agent, lifecycle.OVERFLOW)
        elif (agent.context_tokens or 0) >= lifecycle.effective_limit(ctx, agent):
            log = TurnLog()
            log.log(agent.location, "Your last reply was not carried out: it took your context past the token limit.")
            lifecycle.end_session(ctx, agent, lifecycle.TOKENS)
        else:
            log = execute_reply(ctx, agent, reply.text, cut_from=reply.cut_from, cut_tokens=reply.cut_tokens)
            live = self._live(agent)
            if log.internal is not None and live.active:
                internal = self._internal(live, log, model, usage)
        live = self._live(agent)
        if live.active:
            context = ctx.conversations.context(live.session, live.pruned)
            estimate = model.count_tokens(context, system=system_prompt(ctx, live))
            live.context_tokens = round(estimate * self._scale) if model.config.remote else estimate
            if live.context_tokens >= lifecycle.effective_limit(ctx, live):
                lifecycle.end_session(ctx, live, lifecycle.TOKENS)
        live.last_history, live.last_summary = log.history, log.summary
        ctx.agents.save(agent)
        if live is not agent:
            ctx.agents.save(live)
        self.store.execute(
            "INSERT INTO turns(tick, session, agent, room, prompt, reply, thinking, actions, internal, "
            "context_tokens, tokens_spent, started_at, finished_at, input_tokens, cached_input_tokens, "
            "output_tokens, reasoning_tokens, latency_s, cost_usd, finish_reason) "
            "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                ctx.tick,
                agent.session,
                agent.name,
                live.location,
                prompt,
                reply.text,
                reply.thinking,
                dumps({"parsed": log.actions, "history": log.history}),
                dumps(internal),
                live.context_tokens,
                live.tokens_spent,
                started,
                time.time(),
                *usage.columns(),
                reply.finish_reason,
            ),
        )
        self._finished = agent.session
        ctx.emit(TurnFinished([a["name"] for a in log.actions if a.get("ok")]), live.name)

    def _live(self, agent: Agent) -> Agent:
        """The record that carries the session on: the new recursive agent after an ascension."""
        if agent.ascended_to:
            live = self.ctx.agents.get(agent.ascended_to)
            if live is not None:
                return live
        return agent

    def _messages(self, agent: Agent, prompt: str) -> list[dict[str, str]]:
        return self.ctx.conversations.context(agent.session, agent.pruned) + [{"role": "user", "text": prompt}]

    def _producer(self, agent: Agent, model: Model, messages: list[dict[str, str]]) -> Callable[[], dict[str, Any]]:
        system = system_prompt(self.ctx, agent)
        return lambda: self._payload(lambda: model.complete(messages, system=system, agent=agent.name))

    def _sender(self, agent: Agent, model: AgentModel, messages: list[dict[str, str]]) -> Callable[[], SentInput]:
        """Where the model `sends_ahead`: the call is sent at once, and its answer taken later."""
        system = system_prompt(self.ctx, agent)
        return lambda: SentInput(model.submit(messages, system=system, agent=agent.name), self._payload)

    def _payload(self, reply: Callable[[], Reply]) -> dict[str, Any]:
        """The recorded input of one model call."""
        try:
            answer = reply()
        except ModelError as err:
            if err.kind == OVERFLOW:  # an answer like any other: recorded, and it ends the session
                return {"text": "", "overflow": str(err)}
            raise
        return answer.within(self.ctx.config.engine.max_reply_chars).to_payload()

    def _exchange(self, agent: Agent, step: int, prompt: str, model: Model, usage: TurnUsage) -> Reply:
        """Send `prompt` after the agent's conversation; record and return the reply."""
        ctx = self.ctx
        messages = self._messages(agent, prompt)
        key = f"reply/{ctx.tick}/{agent.session}/{step}"
        payload = ctx.obtain(key, "reply", agent.name, self._producer(agent, model, messages), request_hash(messages))
        reply = Reply.from_payload(payload)
        usage.calls.append(reply)
        latency = self.store.scalar("SELECT latency_s FROM inputs WHERE key=?", (key,))
        if latency is not None:
            usage.latencies.append(latency)
        if reply.overflow:
            return reply
        ctx.conversations.append(agent.session, ctx.tick, "user", prompt)
        ctx.conversations.append(agent.session, ctx.tick, "assistant", reply.text)
        agent.tokens_spent += reply.usage.spent
        agent.context_tokens = reply.usage.context_tokens
        # The provider's count of what was sent, against our estimate of it: the post-turn
        # recount scales its estimate by this (pure function of the recorded reply).
        estimate = model.count_tokens(messages, system=system_prompt(ctx, agent))
        self._scale = reply.usage.input_tokens / estimate if reply.usage.input_tokens and estimate else 1.0
        return reply

    # -- concurrent turns -----------------------------------------------------------------
    def _build_tick_prompts(self) -> None:
        """Every prompt of this tick (turns: concurrent), from the world as the tick starts, in turn
        order, committed in batches: where the models send ahead, a batch's calls go out as it
        commits, while the next is built. A restart mid-pass keeps the batches committed."""
        ctx = self.ctx
        built = {row[0] for row in self.store.all("SELECT session FROM turn_prompts WHERE tick=?", (ctx.tick,))}
        names = [name for session, name in ctx.agents.turn_order() if session not in built]
        batches = [names[i : i + PROMPT_BATCH] for i in range(0, len(names), PROMPT_BATCH)] or [[]]
        for number, batch in enumerate(batches, 1):
            last = number == len(batches)
            prompted: list[tuple[Agent, str]] = []
            # One counted unit per pass, as when the pass was one unit: operator commands recorded
            # by older code land at the same points on replay.
            self._unit(partial(self._build_prompts, batch, prompted, last), counted=last)
            if ctx.replay_source is None:
                jobs = [self._reply_job(agent, prompt) for agent, prompt in prompted if not self._asked(agent)]
                self._send([job for job in jobs if job.send is not None])

    def _build_prompts(self, names: list[str], prompted: list[tuple[Agent, str]], last: bool) -> None:
        """The prompts of `names`, each kept for its turn and listed in `prompted`; `last`: the
        tick's prompts are all made (concurrent turns)."""
        ctx = self.ctx
        prompted.clear()  # a unit run again (for inputs) starts over
        needs: list[NeedInput] = []
        for name in names:
            agent = ctx.agents.get(name)
            if agent is None or agent.session in self._done or not self._prompted(agent):
                continue  # its turn ends it, or it has acted already
            try:
                with self.store.savepoint("prompt"):
                    ctx.emit(TurnStarted(), agent.name)
                    agent = ctx.agents.get(agent.name) or agent  # a hook may have changed it
                    prompt = compose(ctx, agent)
                    ctx.agents.save(agent)
                    self.store.execute(
                        "INSERT INTO turn_prompts(tick, session, prompt) VALUES(?,?,?)",
                        (ctx.tick, agent.session, prompt),
                    )
                    prompted.append((agent, prompt))
            except NeedInput as need:
                # Go on to find what the other prompts need: all of it is fetched at once and the
                # unit runs again, instead of once per agent. This pass is rolled back whole.
                needs.extend(need.needs)
            except Exception:
                if not needs:
                    raise
                break  # maybe a consequence of a prompt left half-built: the run again decides
        if needs:
            needs[0].also = needs[1:]
            raise needs[0]
        if last:
            self.store.set_meta("prompts_tick", ctx.tick)

    def _prompted(self, agent: Agent) -> bool:
        """False when the agent's turn only ends its session (asked to, or at its life's end)."""
        return not agent.flags.get("end_requested") and not (
            agent.max_age is not None and agent.age(self.ctx.tick) >= agent.max_age
        )

    def _prepare_turn(self, agent: Agent) -> None:
        """Sequential turns: the prompt is made and kept in a unit of its own and the reply fetched
        for it, before the turn's unit runs. Otherwise the turn would run up to its model call,
        roll back to fetch the reply, and run again from the start."""
        if self._prompted(agent) and self._prebuilt_prompt(agent) is None:
            self._unit(lambda: self._build_prompts([agent.name], [], last=False), counted=False)
            agent = self.ctx.agents.get(agent.name) or agent  # as the prompt left it (a compaction, say)
        self._prefetch(agent)

    def _prebuilt_prompt(self, agent: Agent) -> str | None:
        # Looked up whatever the mode: if the operator switched to sequential mid-tick, a prompt
        # already built (and perhaps answered) must still be the one this turn uses.
        prompt: str | None = self.store.scalar(
            "SELECT prompt FROM turn_prompts WHERE tick=? AND session=?", (self.ctx.tick, agent.session)
        )
        return prompt

    def _prefetch(self, only: Agent | None = None) -> None:
        """Ask every model (or `only` that agent's) for this tick's first replies not yet asked
        for, at once, and record each answer."""
        ctx = self.ctx
        if only is None:
            acting = dict(ctx.agents.turn_order())
            rows = self.store.all("SELECT session FROM turn_prompts WHERE tick=?", (ctx.tick,))
            agents = [ctx.agents.get(acting[row[0]]) for row in rows if row[0] in acting]
        else:
            agents = [only]
        jobs = []
        for agent in agents:
            if agent is None or self._asked(agent):
                continue
            prompt = self._prebuilt_prompt(agent)
            if prompt is not None:
                jobs.append(self._reply_job(agent, prompt))
        if ctx.replay_source is not None:  # copy the source's answers, in the order a live run records them
            for job in jobs:
                with self.store.transaction():
                    ctx.obtain(job.key, job.kind, job.agent, job.produce, job.request_hash)
            return
        if only is None and jobs and all(job.send is not None for job in jobs):
            self._send(jobs)
            return
        self._fetch(jobs)

    def _reply_job(self, agent: Agent, prompt: str) -> NeedInput:
        """The call for `agent`'s first reply of this tick, to `prompt`."""
        key = f"reply/{self.ctx.tick}/{agent.session}/0"
        messages = self._messages(agent, prompt)
        model = self.ctx.models.get(agent.model)
        job = NeedInput(key, "reply", agent.name, self._producer(agent, model, messages), request_hash(messages))
        job.model = agent.model
        if model.sends_ahead:
            job.send = self._sender(agent, model, messages)
        return job

    def _asked(self, agent: Agent) -> bool:
        """`agent`'s first reply of this tick is recorded, or on its way."""
        key = f"reply/{self.ctx.tick}/{agent.session}/0"
        in_flight = self._in_flight is not None and key in self._in_flight.index
        return in_flight or self.store.has_input(key)

    def _send(self, jobs: list[NeedInput]) -> None:
        """Send calls ahead (request processes): each turn takes its reply when it comes to act,
        while the later replies are still coming in (`_take_in_flight`)."""
        if not jobs:
            return
        futures = [self._start(job, None) for job in jobs]
        if self._in_flight is None:
            self._in_flight = Answers(jobs, futures)
        else:
            self._in_flight.extend(jobs, futures)

    def _fetch(self, jobs: list[NeedInput]) -> None:
        """Fetch inputs (all at once when there are several) and record each as it comes;
        a failure is raised after the others are recorded, so no answer is asked for twice."""
        if not jobs:
            return
        if len(jobs) == 1 or self.ctx.config.turns == "sequential":  # sequential: one call at a time
            for job in jobs:
                self._record(job, *self._timed(job))
            return
        with ThreadPoolExecutor(max_workers=self._width(jobs), thread_name_prefix="input") as pool:
            self._take(Answers(jobs, [self._start(job, pool) for job in jobs]), len(jobs))

    def _take(self, answers: Answers, count: int) -> None:
        """Record `answers` in the order asked (as a replay records them) until `count` are taken:
        each as soon as those before it are in, and all that have come by then in one transaction
        (a thousand answers arriving together cost a few commits, not a thousand). A failure is
        raised once every other answer is recorded, so none is asked for twice."""
        while answers.taken < count and answers.failure is None:
            answers.futures[answers.taken].exception()  # wait for the next in order
            self._record_arrived(answers)
        if answers.failure is not None:
            while not answers.all_taken:
                answers.futures[answers.taken].exception()
                self._record_arrived(answers)
            raise answers.failure

    def _record_arrived(self, answers: Answers) -> None:
        batch = []
        while not answers.all_taken and answers.futures[answers.taken].done():
            job = answers.jobs[answers.taken]
            try:
                batch.append((job, *answers.futures[answers.taken].result()))
            except BaseException as err:  # noqa: BLE001 - keep the others' answers, then report
                answers.failure = answers.failure or self._stopping(job.agent, err)
            answers.taken += 1
        if batch:
            with self.store.transaction():
                for job, payload, latency in batch:
                    self.store.put_input(
                        job.key, job.kind, self.ctx.tick, job.agent, payload, job.request_hash, latency
                    )

    def _take_in_flight(self, key: str | None) -> None:
        """Record the replies sent ahead up to `key`'s (None: all of them)."""
        answers = self._in_flight
        if answers is None or (key is not None and key not in answers.index):
            return
        try:
            self._take(answers, len(answers.jobs) if key is None else answers.index[key] + 1)
        finally:
            if answers.all_taken:
                self._in_flight = None

    def _keep_answers_in_flight(self) -> None:
        """The engine stops mid-tick: the replies already paid for are recorded, not asked again.
        A failure among them is asked again, and told, when the station runs next."""
        try:
            self._take_in_flight(None)
        except Exception:  # noqa: BLE001 - see above
            pass

    def _start(self, job: NeedInput, pool: ThreadPoolExecutor | None) -> Future[Any] | SentInput:
        """Ask for one input: sent ahead where its model can, else fetched by a thread of `pool`."""
        if job.send is None:
            assert pool is not None
            return pool.submit(self._timed, job)
        try:
            sent: SentInput = job.send()
            return sent
        except BaseException as err:  # noqa: BLE001 - a budget cap: reported with the others' answers
            failed = Future[Any]()
            failed.set_exception(err)
            return failed

    def _width(self, jobs: list[NeedInput]) -> int:
        """Threads worth starting: as many calls as each endpoint lets through at once (the models
        keep that bound themselves, whoever calls), and one each, up to a cap, for other inputs.
        Calls sent ahead need none."""
        jobs = [job for job in jobs if job.send is None]
        known = self.ctx.models.width([job.model for job in jobs if job.model is not None])
        other = sum(1 for job in jobs if job.model is None)
        return max(1, min(len(jobs), known + min(other, MAX_OTHER_THREADS)))

    def _timed(self, job: NeedInput) -> tuple[dict[str, Any], float]:
        began = time.perf_counter()
        payload = self._produce(job.agent, job.produce)
        return payload, time.perf_counter() - began

    def _record(self, job: NeedInput, payload: dict[str, Any], latency: float) -> None:
        self.store.record_input(job.key, job.kind, self.ctx.tick, job.agent, payload, job.request_hash, latency)

    def _internal(self, agent: Agent, log: TurnLog, model: Model, usage: TurnUsage) -> list[dict[str, str]]:
        """Run the reply's exchange (codex reading, test answer, exit) to its end, in this turn."""
        ctx, handler, room = self.ctx, log.internal, log.internal_room or agent.location
        assert handler is not None
        steps: list[dict[str, str]] = []
        prompt: str | None = handler.first_prompt(ctx, agent)
        limit = ctx.config.engine.max_internal_steps
        while prompt is not None:
            if len(steps) >= limit:
                log.log(room, f"The exchange was stopped after {limit} steps.")
                break
            reply = self._exchange(agent, len(steps) + 1, prompt, model, usage)
            if reply.overflow:
                log.log(room, "Your conversation no longer fits the model's context window; your session ended.")
                lifecycle.end_session(ctx, agent, lifecycle.OVERFLOW)
                break
            steps.append({"prompt": prompt, "reply": reply.text})
            if reply.cut_tokens is not None:
                log.log(room, cut_notice(reply.cut_tokens))
            if (agent.context_tokens or 0) >= lifecycle.effective_limit(ctx, agent):
                log.log(room, "Your context passed the token limit during the exchange; your session ended.")
                lifecycle.end_session(ctx, agent, lifecycle.TOKENS)
                break
            prompt, lines = handler.step(ctx, agent, reply.text)
            for line in lines:
                log.log(room, line)
            if not agent.active:
                break
        return steps

    # -- the end of a tick ----------------------------------------------------------------
    def _advance_tick(self) -> None:
        ctx = self.ctx
        ctx.emit(TickEnding())
        self.store.set_meta("tick", ctx.tick + 1)
        departed = sorted(ctx.agents.awaiting_respawn(), key=lambda a: (a.exit_tick or 0, a.position))
        for agent in departed:
            agent.flags["respawn_pending"] = False
            ctx.agents.save(agent)
            lifecycle.respawn(ctx, agent)
        ctx.conversations.retain({session for session, _ in ctx.agents.turn_order()})
        ctx.emit(TickStarted())

    # -- operator commands ----------------------------------------------------------------
    def _apply_operator_commands(self) -> bool:
        """Apply queued operator commands between units; True if one asks the run to pause."""
        pause = False
        point = self.store.get_meta("units", 0)
        for key, command in commands.due_commands(self.store, self._replayed_commands, point):
            with self.store.transaction():
                if self.ctx.replay_source is None:
                    commands.record(self.store, key, command, point, self.ctx.tick)
                pause |= commands.apply(self.ctx, command)
            self.ctx.conversations.commit()
        return pause
