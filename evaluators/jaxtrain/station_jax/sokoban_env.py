"""Sokoban as a pure JAX environment: jittable, vmappable, no Python control flow on traced values.

Imports only jax and numpy: inside a training sandbox this file is `station_jax.sokoban_env`
and the station's own packages are not importable there. The rules match the numpy reference
in evaluators/sokoban/levels.py, which the station uses to verify solutions; tests check that
the two agree step by step.

A level is an (H, W) int8 array of cell codes for the inner grid (the outer wall is implicit).
Actions: 0 up, 1 right, 2 down, 3 left. Typical use, batched:

    state = jax.vmap(reset)(levels)                                    # levels: (B, H, W)
    state, reward, done = jax.vmap(step, (0, 0, None))(state, actions, max_steps)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

# Cell codes, also the order of the observation one-hot. They must match the constants in
# evaluators/sokoban/levels.py (a test checks).
FLOOR, WALL, TARGET, AGENT, BOX, AGENT_ON_TARGET, BOX_ON_TARGET = range(7)
N_CODES = 7
N_CHANNELS = N_CODES + 1  # the one-hot, then the elapsed share of the time limit
N_ACTIONS = 4

# Rewards; must match evaluators/sokoban/levels.py as well.
STEP_PENALTY = -0.01
BOX_ON_TARGET_REWARD = 1.0
BOX_OFF_TARGET_PENALTY = -1.0
SOLVE_BONUS = 10.0

# (row, col) offset per action.
_MOVES = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]], dtype=np.int32)


class State(NamedTuple):
    """One environment (add a leading axis for a batch). A NamedTuple is a pytree, so states
    pass through jit, vmap and lax loops as they are."""

    static: jax.Array  # (H, W) int8: FLOOR, WALL or TARGET, the part that never changes
    boxes: jax.Array  # (H, W) bool
    agent: jax.Array  # (2,) int32 row, col
    t: jax.Array  # () int32 steps taken
    done: jax.Array  # () bool: solved or out of time; further steps change nothing
    solved: jax.Array  # () bool: every box on a target


def reset(level: jax.Array) -> State:
    """The start state of an (H, W) int8 level (assumed valid: one agent, boxes == targets)."""
    level = jnp.asarray(level, dtype=jnp.int8)
    is_target = (level == TARGET) | (level == AGENT_ON_TARGET) | (level == BOX_ON_TARGET)
    static = jnp.where(level == WALL, WALL, jnp.where(is_target, TARGET, FLOOR)).astype(jnp.int8)
    is_agent = (level == AGENT) | (level == AGENT_ON_TARGET)
    row, col = jnp.divmod(jnp.argmax(is_agent.reshape(-1)), level.shape[1])
    return State(
        static=static,
        boxes=(level == BOX) | (level == BOX_ON_TARGET),
        agent=jnp.stack([row, col]).astype(jnp.int32),
        t=jnp.zeros((), jnp.int32),
        done=jnp.zeros((), bool),
        solved=jnp.zeros((), bool),
    )


def _read(grid: jax.Array, cell: jax.Array, outside) -> jax.Array:
    """grid[cell], or `outside` when the cell is off the grid (which counts as wall)."""
    height, width = grid.shape
    inside = (cell[0] >= 0) & (cell[0] < height) & (cell[1] >= 0) & (cell[1] < width)
    value = grid[jnp.clip(cell[0], 0, height - 1), jnp.clip(cell[1], 0, width - 1)]
    return jnp.where(inside, value, outside)


def step(state: State, action: jax.Array, max_steps) -> tuple[State, jax.Array, jax.Array]:
    """One move: returns (state, reward float32, done bool). `max_steps` may be a Python int or
    an array. A state that is already done comes back unchanged, with reward 0 and done True."""
    move = jnp.asarray(_MOVES)[action]
    ahead, beyond = state.agent + move, state.agent + 2 * move
    target = state.static == TARGET
    free = (state.static != WALL) & ~state.boxes

    wall_ahead = _read(state.static == WALL, ahead, True)
    box_ahead = _read(state.boxes, ahead, False)
    push = box_ahead & _read(free, beyond, False)
    moves = ~wall_ahead & (~box_ahead | push)

    # Both writes are no-ops unless pushing; then both cells are on the grid, so no clipping bites.
    height, width = state.boxes.shape
    r1, c1 = jnp.clip(ahead[0], 0, height - 1), jnp.clip(ahead[1], 0, width - 1)
    r2, c2 = jnp.clip(beyond[0], 0, height - 1), jnp.clip(beyond[1], 0, width - 1)
    boxes = state.boxes.at[r1, c1].set(state.boxes[r1, c1] & ~push)
    boxes = boxes.at[r2, c2].set(boxes[r2, c2] | push)

    solved = ~jnp.any(boxes & ~target)
    was_on = _read(target, ahead, False) & push
    now_on = _read(target, beyond, False) & push
    reward = (
        STEP_PENALTY
        + jnp.where(now_on, BOX_ON_TARGET_REWARD, 0.0)
        + jnp.where(was_on, BOX_OFF_TARGET_PENALTY, 0.0)
        + jnp.where(solved, SOLVE_BONUS, 0.0)
    ).astype(jnp.float32)
    t = state.t + 1
    new = State(
        static=state.static,
        boxes=boxes,
        agent=jnp.where(moves, ahead, state.agent).astype(jnp.int32),
        t=t,
        done=solved | (t >= max_steps),
        solved=solved,
    )
    out = jax.tree.map(lambda old, fresh: jnp.where(state.done, old, fresh), state, new)
    return out, jnp.where(state.done, jnp.float32(0.0), reward), out.done


def cells(state: State) -> jax.Array:
    """(H, W) int8 cell codes of a state: the inverse of `reset`."""
    target = state.static == TARGET
    codes = jnp.where(state.boxes, jnp.where(target, BOX_ON_TARGET, BOX), state.static)
    row, col = state.agent[0], state.agent[1]
    agent_code = jnp.where(target[row, col], AGENT_ON_TARGET, AGENT)
    return codes.at[row, col].set(agent_code).astype(jnp.int8)


def observe(state: State, max_steps) -> jax.Array:
    """(H, W, 8) float32: a one-hot of the 7 cell codes, then t / max_steps in every cell."""
    one_hot = jax.nn.one_hot(cells(state), N_CODES, dtype=jnp.float32)
    clock = jnp.full(one_hot.shape[:2] + (1,), state.t / jnp.asarray(max_steps, jnp.float32), jnp.float32)
    return jnp.concatenate([one_hot, clock], axis=-1)


def step_autoreset(
    state: State, action: jax.Array, max_steps, next_level: jax.Array
) -> tuple[State, jax.Array, jax.Array, jax.Array]:
    """`step`, then start over from `next_level` if the episode just ended.

    Returns (state, obs, reward, done): reward and done belong to the step taken; when done is
    True the state is already `reset(next_level)` and obs is that fresh state's observation (the
    final observation of the ended episode is not returned). The caller supplies next_level,
    e.g. a level drawn from its training set; it is ignored when the episode goes on. Under
    vmap every env passes its own next_level."""
    stepped, reward, done = step(state, action, max_steps)
    fresh = reset(next_level)
    out = jax.tree.map(lambda new, old: jnp.where(done, new, old), fresh, stepped)
    return out, observe(out, max_steps), reward, done
