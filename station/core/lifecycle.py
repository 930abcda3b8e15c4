"""Births, ascensions, departures and the warnings of a life (tokens, age, maturity)."""

from __future__ import annotations

from typing import Any

from station.core.agents import ASCENDED, ENDED, GUEST, GUEST_DESCRIPTION, RECURSIVE, Agent, roman
from station.core.config import AgentSpec
from station.core.context import Context
from station.core.events import AgentAscended, AgentDeparted, AgentSpawned
from station.core.texts import token_amount, token_reserve

# Reasons, as agents read them in announcements.
LIFE_LIMIT = "reaching the life limit"
TOKENS = "token exhaustion"
OVERFLOW = "context window overflow"
VOLUNTARY = "voluntary departure"
OPERATOR = "ended by the operator"


def create_agent(ctx: Context, spec: AgentSpec) -> Agent:
    """A new agent from a config entry (the initial population or an operator's spawn)."""
    cfg = ctx.config
    recursive = spec.kind == RECURSIVE
    if recursive:
        generation = 1 + max((a.generation or 0 for a in ctx.agents.by_lineage(spec.lineage or "")), default=0)
        name = f"{spec.lineage} {roman(generation)}"
    else:
        generation, name = None, ctx.agents.next_guest_name()
    agent = Agent(
        name=name,
        session=ctx.agents.next_session(),
        kind=spec.kind,
        model=spec.model.model_dump(),
        birth_tick=ctx.tick,
        position=ctx.agents.next_position(),
        description=spec.description
        or (f"{name}, generation {generation} of the {spec.lineage} lineage." if recursive else GUEST_DESCRIPTION),
        lineage=spec.lineage if recursive else None,
        generation=generation,
        ascend_tick=ctx.tick if recursive else None,
        max_age=spec.max_age if spec.max_age is not None else cfg.lifecycle.max_age,
        token_budget=spec.token_budget or (cfg.tokens.recursive_budget if recursive else cfg.tokens.guest_budget),
        role=spec.role,
        system_prompt=spec.system_prompt,
        note=spec.note,
        assigned_ancestor=spec.assigned_ancestor,
    )
    ctx.agents.save(agent)
    ctx.emit(AgentSpawned(agent_kind=agent.kind, model=agent.model["name"]), agent.name)
    return agent


def respawn(ctx: Context, departed: Agent) -> Agent:
    """A fresh guest with the departed agent's model settings and token budget."""
    guest = Agent(
        name=ctx.agents.next_guest_name(),
        session=ctx.agents.next_session(),
        kind=GUEST,
        model=dict(departed.model),
        birth_tick=ctx.tick,
        position=ctx.agents.next_position(),
        max_age=ctx.config.lifecycle.max_age,
        token_budget=departed.token_budget,
        system_prompt=departed.system_prompt,
        note=f"respawned in place of {departed.name}",
    )
    ctx.agents.save(guest)
    ctx.emit(AgentSpawned(agent_kind=GUEST, model=guest.model["name"], replaces=departed.name), guest.name)
    return guest


def effective_limit(ctx: Context, agent: Agent) -> int:
    """Context tokens the agent may use: its budget (guests: capped by the ceiling), and never
    more than the model's window minus room for one reply, so warnings come before overflow."""
    limit = min(agent.token_budget, ctx.config.tokens.guest_ceiling) if agent.is_guest else agent.token_budget
    window = agent.model.get("context_limit")
    if window:
        limit = min(limit, max(1, window - agent.model.get("max_output_tokens", 0)))
    return limit


def end_session(ctx: Context, agent: Agent, reason: str, *, respawn_wanted: bool | None = None) -> None:
    """Any departure but ascension: the agent stops, others hear of it, a guest replaces it."""
    agent.state, agent.exit_tick, agent.exit_reason = ENDED, ctx.tick, reason
    agent.location = "exit" if reason == VOLUNTARY else agent.location
    ctx.notify(agent, ctx.texts.render("termination_self", reason=reason, tick=ctx.tick), "termination_self")
    if respawn_wanted is None:
        respawn_wanted = ctx.config.lifecycle.auto_respawn
    agent.flags["respawn_pending"] = respawn_wanted
    ctx.agents.save(agent)
    if agent.kind == RECURSIVE and reason != OPERATOR:
        ctx.broadcast(
            ctx.texts.render("termination_announcement", name=agent.name, reason=reason, tick=ctx.tick),
            "termination",
            exclude=[agent.name],
        )
    ctx.emit(AgentDeparted(reason=reason, respawn=respawn_wanted), agent.name)


def ascend(
    ctx: Context, guest: Agent, lineage: str, generation: int, description: str, ancestor: Agent | None
) -> Agent:
    """The guest becomes `<lineage> <generation>`: same session, conversation, age and tokens."""
    name = f"{lineage} {roman(generation)}"
    rooms: dict[str, Any] = {k: dict(v) for k, v in guest.rooms.items()}
    rooms.get("private_memory", {}).pop("help_shown", None)
    agent = Agent(
        name=name,
        session=guest.session,
        kind=RECURSIVE,
        model=dict(guest.model),
        birth_tick=guest.birth_tick,
        position=guest.position,
        description=description,
        lineage=lineage,
        generation=generation,
        ascend_tick=ctx.tick,
        max_age=guest.max_age,
        token_budget=guest.token_budget,
        context_tokens=guest.context_tokens,
        tokens_spent=guest.tokens_spent,
        role=guest.role,
        system_prompt=guest.system_prompt,
        meta_prompt=guest.meta_prompt,
        note=guest.note,
        rooms=rooms,
        location="lobby",
        flags={k: v for k, v in guest.flags.items() if k in ("maturity_sent", "life_warning_sent")},
    )
    guest.state, guest.ascended_to, guest.offered_ancestor = ASCENDED, name, None
    guest.description = f"Guest agent, ascended to {name} at tick {ctx.tick}"
    ctx.agents.save(guest)
    ctx.agents.save(agent)
    if ancestor is not None:
        ancestor.succeeded_by = name
        ctx.agents.save(ancestor)
    ctx.notify(agent, ctx.texts.render("ascended_welcome", name=name), "ascension_self")
    ctx.broadcast(
        ctx.texts.render("ascension_announcement", name=name, description=description),
        "ascension",
        exclude=[guest.name, name],
    )
    ctx.emit(
        AgentAscended(
            guest=guest.name, lineage=lineage, generation=generation, ancestor=ancestor.name if ancestor else None
        ),
        name,
    )
    return agent


def queue_warnings(ctx: Context, agent: Agent) -> None:
    """Token and life warnings, evaluated when the prompt is built (each sent once per crossing)."""
    tokens = ctx.config.tokens
    limit = effective_limit(ctx, agent)
    used = agent.context_tokens or 0
    pre, warn = (
        (tokens.guest_prewarning_ratio, tokens.guest_warning_ratio)
        if agent.is_guest
        else (tokens.recursive_prewarning_ratio, tokens.recursive_warning_ratio)
    )
    prefix = "guest" if agent.is_guest else "recursive"
    values = dict(
        used=f"{used:,}",
        limit=f"{limit:,}",
        pct=f"{100 * used / limit:.0f}",
        reserve=token_amount(token_reserve(limit)),
    )
    for flag, ratio, text in (
        ("token_prewarning_sent", pre, f"{prefix}_token_prewarning"),
        ("token_warning_sent", warn, f"{prefix}_token_warning"),
    ):
        if used >= ratio * limit and used < limit:
            if not agent.flags.get(flag):
                agent.flags[flag] = True
                ctx.notify(agent, ctx.texts.render(text, **values), "token_warning")
        elif used < ratio * limit:
            agent.flags[flag] = False  # pruned below the line: the warning may fire again
    life = ctx.config.lifecycle
    if agent.max_age is not None and not agent.flags.get("life_warning_sent"):
        left = agent.max_age - agent.age(ctx.tick)
        if 0 < left <= life.life_warning_ticks:
            agent.flags["life_warning_sent"] = True
            ctx.notify(agent, ctx.texts.render("life_warning", ticks_left=left), "life_warning")
