"""Sokoban's scoring mode: the station plays the held-out levels itself with the exported policy.

Runs in the scoring sandbox (scoring.py, `MODES["sokoban"]`), which holds the held-out levels
(`scoring_data/eval_levels.npy`) and never runs the submission's Python. The training run handed
over a policy step for ONE environment (station_jax/sokoban.py, `export_policy`):

    (parameters..., obs (H, W, 8) float32, done () bool, memory (M,) float32)
        -> (logits (4,) float32, memory (M,) float32)

Each level is played on its own, with the station's environment (sokoban_env.py): reset, then
`max_steps` times observe, ask the policy for logits, sample an action from them (the sampling
key is the station's: one stream per level), step. The policy sees only its own level's
observations and the memory it returned one step before, zeros with `done` True at the first
observation; nothing passes from one level to the next (a `lax.map` over levels, nothing
carried). The outputs are the action sequences, (levels, max_steps) int8: the station replays
them on its own copy of the levels with its numpy rules (evaluators/sokoban/levels.py) to count
solves.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

LEVELS_FILE = "eval_levels.npy"


def play_levels(exported: Any, settings: dict[str, Any], data: str) -> Callable[[list[Any]], dict[str, Any]]:
    """The scorer for one trial: parameters -> {"output_0": actions (levels, max_steps) int8}."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from . import sokoban_env as env

    levels = np.load(os.path.join(data, LEVELS_FILE), allow_pickle=False)
    max_steps = int(settings["max_steps"])
    (memory_shape, memory_dtype) = settings["inputs"][2]
    keys = jax.random.split(jax.random.PRNGKey(int(settings["seed"])), len(levels))

    def episode(leaves, level, key):
        def one(carry, step_key):
            state, first, memory = carry
            logits, memory = exported.call(*leaves, env.observe(state, max_steps), first, memory)
            action = jax.random.categorical(step_key, logits)
            state, _, _ = env.step(state, action, max_steps)
            return (state, jnp.zeros((), bool), memory), action.astype(jnp.int8)

        start = (env.reset(level), jnp.ones((), bool), jnp.zeros(tuple(memory_shape), memory_dtype))
        _, actions = jax.lax.scan(one, start, jax.random.split(key, max_steps))
        return actions

    every = jax.jit(lambda leaves, levels, keys: jax.lax.map(lambda lk: episode(leaves, *lk), (levels, keys)))
    # compiled now, while the run trains, so that scoring its parameters later is only the play
    n_params = len(exported.in_avals) - len(settings["inputs"])
    params = [jax.ShapeDtypeStruct(aval.shape, aval.dtype) for aval in exported.in_avals[:n_params]]
    compiled = every.lower(params, levels, keys).compile()

    def score(leaves: list[Any]) -> dict[str, Any]:
        return {"output_0": np.asarray(compiled(leaves, levels, keys))}

    return score
