"""Automatic context compaction (`tokens.compaction`): before a prompt, an agent whose context
has passed a share of its model's window gets its older dialogue replaced by a summary.

The summary is a recorded input (a replay reuses it and calls no model), and the compaction is
kept as a block of `agent.pruned`, as a prune by Token Management is: the conversation table
keeps every entry (the viewer shows the whole dialogue), only what the model is sent changes.
What stays whole: the system prompt, protected ticks (keywords and features' `protected_ticks`
flags) and the agent's last `keep_turns` turns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from station.core.agents import Agent
from station.core.context import Context, request_hash
from station.core.events import Event, event_kind, optional
from station.core.model_api import OVERFLOW, AgentModel, ModelError, Reply

REQUEST_HEADER = "## Context Compaction Request"  # the scripted model knows the request by it


@event_kind("context_compacted")
@dataclass(frozen=True)
class ContextCompacted(Event):
    ticks: list[int]  # first and last tick summarised
    tokens_before: int
    tokens_after: int
    summary_model: str
    spent_tokens: int
    cost_usd: float | None = optional()
    failed: str | None = optional()  # why no summary came (the older part was left as it was)


def window(agent: Agent) -> int | None:
    """Tokens of the model's window a conversation may fill (room kept for a reply); None: unknown."""
    limit = agent.model.get("context_limit")
    return max(1, limit - agent.model.get("max_output_tokens", 0)) if limit else None


def compact_if_near_window(ctx: Context, agent: Agent, system: Callable[[], str | None]) -> None:
    """Called as a prompt is built: O(1) unless the agent's context has passed the threshold.
    `system`: the system prompt the agent's model is sent (made only when a compaction runs)."""
    cfg = ctx.config.tokens.compaction
    if not cfg.enabled:
        return
    limit = window(agent)
    if limit is None or (agent.context_tokens or 0) < cfg.at_share * limit:
        return
    span = older_span(ctx, agent, cfg.keep_turns)
    if span is None or span[1] <= agent.flags.get("compacted_through", -1):
        return  # nothing new to summarise: the kept part alone is this large
    compact(ctx, agent, span, system())


def older_span(ctx: Context, agent: Agent, keep_turns: int) -> tuple[int, int] | None:
    """The first and last tick before the agent's last `keep_turns` turns; None if there are none."""
    entries = ctx.conversations.entries(agent.session)
    turns = sorted({e.tick for e in entries if e.role == "assistant"})
    if len(turns) <= keep_turns:
        return None
    last = turns[-keep_turns] - 1
    first = entries[0].tick
    return (first, last) if first <= last else None


def protected(ctx: Context, agent: Agent) -> set[int]:
    """Ticks no compaction removes: those Token Management may not prune either."""
    held = {t for ticks in agent.flags.get("protected_ticks", {}).values() for t in ticks}
    return ctx.conversations.protected_ticks(agent.session) | held


def compact(ctx: Context, agent: Agent, span: tuple[int, int], system: str | None) -> None:
    first, last = span
    kept = protected(ctx, agent)
    new_blocks = blocks(first, last, kept)
    if not new_blocks:
        return  # every older tick is protected
    older = ctx.conversations.context(agent.session, agent.pruned, through=last, leave_out=kept)
    request = REQUEST_HEADER + "\n\n" + ctx.texts.render("compaction_request", first=first, last=last)
    messages = [*older, {"role": "user", "text": request}]
    summary_config = ctx.config.tokens.compaction.model
    summarizer = ctx.models.get(summary_config or agent.model)
    limit = ctx.config.engine.max_reply_chars
    payload = ctx.obtain(
        f"compaction/{ctx.tick}/{agent.session}",
        "compaction",
        agent.name,
        lambda: _summary_payload(summarizer, messages, system, agent.name, limit),
        request_hash(messages),
    )
    reply = Reply.from_payload(payload)
    agent.tokens_spent += reply.usage.spent
    agent.flags["compacted_through"] = last
    before = agent.context_tokens or 0
    event = ContextCompacted(
        ticks=[first, last],
        tokens_before=before,
        tokens_after=before,
        summary_model=summary_config.name if summary_config else agent.model["name"],
        spent_tokens=reply.usage.spent,
        cost_usd=reply.cost_usd,
    )
    summary = reply.text.strip()
    if reply.overflow or not summary:
        ctx.emit(replace(event, failed=reply.overflow or "the summary was empty"), agent.name)
        return
    own = ctx.models.get(agent.model)
    estimate_before = own.count_tokens(ctx.conversations.context(agent.session, agent.pruned), system=system)
    new_blocks[0]["summary"] = summary
    # A compaction covers every earlier one (from the first tick on): those blocks can go.
    agent.pruned = [b for b in agent.pruned if not b.get("compacted")] + new_blocks
    estimate_after = own.count_tokens(ctx.conversations.context(agent.session, agent.pruned), system=system)
    # The provider's count scaled as our estimate shrank (a pure function of recorded facts).
    agent.context_tokens = round(before * estimate_after / estimate_before) if estimate_before else estimate_after
    ctx.notify(
        agent,
        ctx.texts.render(
            "compaction_done",
            first=first,
            last=last,
            before=f"{before:,}",
            after=f"{agent.context_tokens:,}",
            turns=ctx.config.tokens.compaction.keep_turns,
        ),
        "compaction",
    )
    ctx.emit(replace(event, tokens_after=agent.context_tokens), agent.name)


def blocks(first: int, last: int, kept: set[int]) -> list[dict[str, Any]]:
    """Pruned blocks covering first..last around the kept ticks (the first will carry the summary),
    each marked with the span it belongs to."""
    runs: list[list[int]] = []
    for tick in range(first, last + 1):
        if tick in kept:
            continue
        if runs and runs[-1][1] == tick - 1:
            runs[-1][1] = tick
        else:
            runs.append([tick, tick])
    return [{"ticks": run, "summary": "", "compacted": [first, last]} for run in runs]


def _summary_payload(
    model: AgentModel, messages: list[dict[str, str]], system: str | None, agent: str, limit: int
) -> dict[str, Any]:
    """The recorded input of the summary call; a window overflow is an answer (no summary)."""
    try:
        reply = model.complete(messages, system=system, agent=agent)
    except ModelError as err:
        if err.kind == OVERFLOW:
            return {"text": "", "overflow": str(err)}
        raise
    return reply.within(limit).to_payload()
