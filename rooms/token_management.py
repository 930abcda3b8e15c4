"""Token Management Room: recursive agents prune past ticks from the context they are sent."""

from __future__ import annotations

import random
import re
from typing import Annotated, Any

from pydantic import Field

from station.core.agents import Agent
from station.core.context import Context
from station.core.room import Outcome, Params, Room, action, register_room
from station.models.scripted import Situation, room_play

PAGE_ROWS = 300


class PruneBlock(Params):
    ticks: int | str
    summary: str = Field("", max_length=2000)


class PruneParams(Params):
    # Optional: `prune_response 441:458` gives the ticks on the action line instead.
    prune_blocks: Annotated[list[PruneBlock], Field(min_length=1, max_length=100)] | None = None


USAGE = (
    "Usage: /execute_action{prune_response 441:458} (those ticks removed completely), or "
    "/execute_action{prune_response} with a ```yaml block listing prune_blocks (ticks and a summary)."
)


def parse_ticks(value: int | str) -> tuple[int, int]:
    """`12`, `"12"`, `"12-15"` or `"12:15"` (inclusive) or `"12,13,14"` (consecutive) -> (first, last)."""
    if isinstance(value, int):
        return value, value
    text = value.strip()
    if re.fullmatch(r"\d+", text):
        return int(text), int(text)
    m = re.fullmatch(r"(\d+)\s*[-:]\s*(\d+)", text)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        if a > b:
            raise ValueError(f"'{text}': the first tick is after the last")
        return a, b
    if re.fullmatch(r"\d+(\s*,\s*\d+)+", text):
        ticks = [int(t) for t in text.split(",")]
        if ticks != list(range(ticks[0], ticks[0] + len(ticks))):
            raise ValueError(f"'{text}': listed ticks must be consecutive")
        return ticks[0], ticks[-1]
    raise ValueError(f"'{text}' is not a tick, a range 'a-b' (or 'a:b') or a list 'a,b,c'")


@register_room
class TokenManagementRoom(Room):
    short, name = "token_management", "Token Management Room"
    lobby_order = 110
    guests_allowed = False

    def help_values(self, ctx: Context) -> dict[str, Any]:
        return {"cooldown_ticks": ctx.config.tokens.prune_cooldown_ticks}

    def _cooldown_left(self, ctx: Context, agent: Agent) -> int:
        cooldown = ctx.config.tokens.prune_cooldown_ticks
        last = agent.room_state(self.short).get("last_prune_tick", -cooldown)
        return max(0, cooldown - (ctx.tick - last))

    def render(self, ctx: Context, agent: Agent) -> str:
        left = self._cooldown_left(ctx, agent)
        lines = ["Pruning is available now." if left == 0 else f"Next prune possible in {left} tick(s)."]
        counts = ctx.conversations.words_per_tick(agent.session)
        pruned = _pruned_ticks(agent)
        protected = _protected_ticks(ctx, agent)
        ticks = sorted((t for t in counts if t not in pruned or t in protected), reverse=True)
        pages = max(1, -(-len(ticks) // PAGE_ROWS))
        page = min(max(1, agent.room_state(self.short).get("page", 1)), pages)
        lines += [
            "",
            f"**Dialogue History (Page {page} / {pages})**",
            "",
            "| Tick | Full Response Length |",
            "|---|---|",
        ]
        for t in ticks[(page - 1) * PAGE_ROWS : page * PAGE_ROWS]:
            lines.append(f"| {t}{' (Protected)' if t in protected else ''} | {counts[t]} |")
        lines += [
            "",
            "Tip: one `prune_response` can hold several blocks.",
            "Tip: don't wait idly for the cooldown; keep working and prune later.",
        ]
        return "\n".join(lines)

    @action("page")
    def page(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        if not args or not args.strip().isdigit() or int(args) < 1:
            return Outcome(["Usage: /execute_action{page <n>} with n a positive whole number."])
        agent.room_state(self.short)["page"] = int(args)
        return Outcome([f"Showing page {int(args)} of your dialogue history."])

    @action("prune_response", params=PruneParams, yaml_required=False)
    def prune_response(self, ctx: Context, agent: Agent, args: str | None, p: PruneParams) -> Outcome:
        left = self._cooldown_left(ctx, agent)
        if left:
            return Outcome([f"Pruning cooldown active: {left} tick(s) remaining."])
        if args and p.prune_blocks:
            return Outcome(
                ["Nothing was pruned: give the ticks either on the action line or in prune_blocks, not both. " + USAGE]
            )
        if not args and not p.prune_blocks:
            return Outcome(["Nothing was pruned: no ticks were given. " + USAGE])
        # The argument form is one block with no summary: the same checks, complete removal.
        return self._prune(ctx, agent, p.prune_blocks or [PruneBlock(ticks=(args or "").strip())])

    def _prune(self, ctx: Context, agent: Agent, prune_blocks: list[PruneBlock]) -> Outcome:
        already = _pruned_ticks(agent)
        protected = _protected_ticks(ctx, agent)
        taken: set[int] = set()
        blocks: list[dict[str, Any]] = []
        errors: list[str] = []
        for i, block in enumerate(prune_blocks, 1):
            try:
                a, b = parse_ticks(block.ticks)
            except ValueError as err:
                errors.append(f"block {i}: {err}")
                continue
            span = set(range(a, b + 1))
            problem = (
                f"includes the current or a future tick (now {ctx.tick})"
                if b >= ctx.tick
                else f"tick(s) {sorted(span & already)} are already pruned"
                if span & already
                else f"tick(s) {sorted(span & protected)} are protected"
                if span & protected
                else f"tick(s) {sorted(span & taken)} appear in an earlier block"
                if span & taken
                else None
            )
            if problem:
                errors.append(f"block {i} ({a}-{b}): {problem}")
            taken |= span
            blocks.append({"ticks": [a, b], "summary": block.summary.strip()})
        if errors:
            return Outcome(["Nothing was pruned: " + "; ".join(errors)])
        agent.pruned.extend(blocks)
        agent.room_state(self.short)["last_prune_tick"] = ctx.tick
        described = "; ".join(
            f"{b['ticks'][0]}-{b['ticks'][1]}: " + (f"'{b['summary'][:50]}'" if b["summary"] else "complete removal")
            for b in blocks
        )
        n_ticks = sum(b["ticks"][1] - b["ticks"][0] + 1 for b in blocks)
        return Outcome(
            [
                f"Pruned {len(blocks)} block(s), {n_ticks} tick(s): {described}. "
                "Your next prompt's context is smaller; past actions are not undone."
            ]
        )


def _protected_ticks(ctx: Context, agent: Agent) -> set[int]:
    """Ticks that carry a protected keyword, and those features hold for the agent in its
    `protected_ticks` flag (feature -> ticks: the start of a meta-reflection, say)."""
    held = {t for ticks in agent.flags.get("protected_ticks", {}).values() for t in ticks}
    return ctx.conversations.protected_ticks(agent.session) | held


def _pruned_ticks(agent: Agent) -> set[int]:
    return {t for b in agent.pruned for t in range(b["ticks"][0], b["ticks"][1] + 1)}


# -- the scripted policy's play here: look at the first page (it prunes when its context is full)
@room_play("token_management")
def _play_token_management(s: Situation, rng: random.Random) -> list[str]:
    return ["/execute_action{page 1}"]
