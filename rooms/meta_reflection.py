"""Compulsory meta-reflection: its prompt file, each mature agent's countdown, its protected ticks.

The countdown is world state (the tick it started from, in the agent's Reflection Chamber
state), set and read only during turns, so a replay counts and warns exactly as the run did.
The `meta_reflect` action and the hook that warns live in the Reflection Chamber (rooms/reflection.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from station.core.agents import Agent
from station.core.config import ConfigError
from station.core.context import Context
from station.core.texts import CODEX_ROOT

SHIPPED_PROMPTS = CODEX_ROOT / "meta_reflection_prompts.yaml"
AUDIENCES = ("all", "supervisor", "non_supervisor")
ROOM = "reflect"  # the room whose state holds the countdown
SINCE = "meta_since"  # the tick the agent's current countdown started from
PROTECTED = "meta_reflection"  # this feature's entry in the agent's `protected_ticks` flag


@dataclass(frozen=True)
class MetaPrompt:
    text: str
    audience: str


def prompt_file(configured: str | None) -> Path:
    return Path(configured) if configured else SHIPPED_PROMPTS


@functools.lru_cache(maxsize=8)
def load_prompts(path: Path) -> tuple[MetaPrompt, ...]:
    """The prompts of a prompt file; a bad file is a ConfigError naming the file and the entry."""
    where = f"reflection.meta_prompt_file ({path})"
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(f"{where}: cannot read it: {err.strerror or err}") from None
    except (UnicodeDecodeError, yaml.YAMLError) as err:
        raise ConfigError(f"{where}: not a UTF-8 YAML file: {' '.join(str(err).split())}") from None
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: expected a non-empty YAML list of prompts")
    prompts = tuple(_prompt(entry, f"{where}, prompt #{i}") for i, entry in enumerate(raw, 1))
    for side in ("supervisor", "non_supervisor"):
        if not any(p.audience in ("all", side) for p in prompts):
            raise ConfigError(f"{where}: no prompt is meant for {side} agents; add one with audience all or {side}")
    return prompts


def _prompt(entry: Any, where: str) -> MetaPrompt:
    if isinstance(entry, str):
        entry = {"text": entry}
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected a string or a mapping with text and audience")
    unknown = sorted(str(k) for k in entry if k not in ("text", "audience"))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (it reads: text, audience)")
    text, audience = entry.get("text"), entry.get("audience", "all")
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{where}: 'text' must be a non-empty string")
    if audience not in AUDIENCES:
        raise ConfigError(f"{where}: audience {audience!r} is not one of {', '.join(AUDIENCES)}")
    return MetaPrompt(" ".join(text.split()), audience)


def draw_prompt(ctx: Context, agent: Agent, prompts: tuple[MetaPrompt, ...]) -> MetaPrompt:
    """One prompt meant for this agent, drawn from the world's seed (the same in a replay)."""
    side = "supervisor" if agent.role == "supervisor" else "non_supervisor"
    eligible = [p for p in prompts if p.audience in ("all", side)]
    return ctx.rng("meta_reflect", agent.name, ctx.tick).choice(eligible)


def ticks_counted(ctx: Context, agent: Agent) -> int:
    """Ticks since the agent's countdown started (0 before its first turn as a mature agent)."""
    return ctx.tick - agent.room_state(ROOM).get(SINCE, ctx.tick)


def restart_countdown(ctx: Context, agent: Agent) -> None:
    agent.room_state(ROOM)[SINCE] = ctx.tick


def protect_start_tick(ctx: Context, agent: Agent, limit: int | None) -> None:
    """Keep this tick out of pruning; only the newest `limit` meta-reflection ticks stay protected."""
    held: dict[str, list[int]] = agent.flags.setdefault("protected_ticks", {})
    ticks = [*held.get(PROTECTED, []), ctx.tick]
    held[PROTECTED] = ticks if limit is None else ticks[-limit:] if limit else []
