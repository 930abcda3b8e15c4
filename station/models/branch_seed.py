"""A branch's seed in its model calls: branches forked from one start (`station multistart`) differ
because every model that samples with a seed gets one mixed from its own and the branch's."""

from __future__ import annotations

import hashlib
import json

from station.core.config import ModelConfig


def mixed(seed: int, branch_seed: int) -> int:
    """A seed that depends on both (31 bits: every provider that takes a seed accepts it)."""
    digest = hashlib.sha256(json.dumps([seed, branch_seed]).encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 1


def branch_seeded(config: ModelConfig, branch_seed: int | None) -> ModelConfig:
    """`config` as a branch with `branch_seed` calls it; unchanged without one (a station that is no
    branch) and for providers that take no seed (Anthropic, Gemini here, the replay provider)."""
    if branch_seed is None:
        return config
    if config.provider == "scripted":  # the offline agents' decisions (the system roles ignore it)
        return config.model_copy(update={"seed": mixed(config.seed, branch_seed)})
    if config.provider == "openai":  # the API's `seed`: best-effort determinism of its sampling
        options = {**config.options, "seed": mixed(int(config.options.get("seed", 0)), branch_seed)}
        return config.model_copy(update={"options": options})
    return config
