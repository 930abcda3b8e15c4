"""Sokoban: the numpy reference rules and generator (evaluators.sokoban.levels) and the JAX env
(station_jax.sokoban_env) that training runs use. Rule tests run against both implementations;
a cross-check plays random levels and actions through both and compares every step."""
from __future__ import annotations

import collections

import numpy as np
import pytest
from lazy_modules import Lazy, made_on_first_call

from evaluators.sokoban import levels

jax, jnp = Lazy("jax"), Lazy("jax.numpy")  # imported by the first test that uses them, not at collection
env = Lazy("evaluators.jaxtrain.station_jax.sokoban_env")

UP, RIGHT, DOWN, LEFT = range(4)
STEP = -0.01

# The env compiled, as training and scoring run it (inside jit): one compilation per level shape
# instead of one per operation, most of these tests' CPU. max_steps passed as an array.
_jit_step = made_on_first_call(lambda: jax.jit(env.step))
_jit_cells = made_on_first_call(lambda: jax.jit(env.cells))
_jit_reset = made_on_first_call(lambda: jax.jit(env.reset))
_jit_observe = made_on_first_call(lambda: jax.jit(env.observe))
_jit_autoreset = made_on_first_call(lambda: jax.jit(env.step_autoreset))


def play_numpy(level, actions, max_steps=100):
    """[(cells, reward, done)] per action under the reference rules; steps after the end are
    no-ops with reward 0, as in the JAX env."""
    grid, t, done, out = np.asarray(level), 0, False, []
    for action in actions:
        if not done:
            grid, reward, solved = levels.step(grid, action)
            t += 1
            done = solved or t >= max_steps
        else:
            reward = 0.0
        out.append((grid, reward, done))
    return out


def play_jax(level, actions, max_steps=100):
    state, out = _jit_reset(jnp.asarray(level)), []
    for action in actions:
        state, reward, done = _jit_step(state, jnp.int32(action), jnp.int32(max_steps))
        out.append((np.asarray(_jit_cells(state)), float(reward), bool(done)))
    return out


@pytest.fixture(params=["numpy", "jax"])
def play(request):
    return play_numpy if request.param == "numpy" else play_jax


def agent_at(grid) -> tuple[int, int]:
    (row, col), = np.argwhere(np.isin(grid, (levels.AGENT, levels.AGENT_ON_TARGET)))
    return int(row), int(col)


# --- text form ------------------------------------------------------------------------------


def test_render_and_parse_are_inverse():
    text = "#@ .\n$* #"
    assert levels.render(levels.parse(text)) == text
    level = levels.parse("""
@-$.
#--#
""")  # blank first and last lines are dropped; '-' is floor too
    assert level.tolist() == [[3, 0, 4, 2], [1, 0, 0, 1]]
    assert levels.parse("@$.\n#").tolist() == [[3, 4, 2], [1, 0, 0]]  # short lines padded with floor
    with pytest.raises(ValueError):
        levels.parse("@$x.")


# --- rules, on both implementations ---------------------------------------------------------


def test_walking_moves_the_agent(play):
    level = levels.parse("@--\n---\n-$.")
    out = play(level, [RIGHT, DOWN, LEFT, UP])
    assert [agent_at(grid) for grid, _, _ in out] == [(0, 1), (1, 1), (1, 0), (0, 0)]
    assert [reward for _, reward, _ in out] == pytest.approx([STEP] * 4)
    assert not any(done for _, _, done in out)


def test_walls_and_grid_edge_block(play):
    level = levels.parse("@#\n-$\n-.")
    out = play(level, [UP, LEFT, RIGHT])
    for grid, reward, done in out:
        assert (grid == level).all()
        assert reward == pytest.approx(STEP) and not done


def test_pushing_a_box(play):
    level = levels.parse("@$--.")
    (grid, reward, _), = play(level, [RIGHT])
    assert levels.render(grid) == " @$ ."
    assert reward == pytest.approx(STEP)


@pytest.mark.parametrize("text", ["@$#.", ".-@$", "@$$..", "@$*."])
def test_blocked_box_moves_nothing(play, text):
    """A box against a wall, the grid edge or another box stays, and so does the agent."""
    level = levels.parse(text)
    (grid, reward, done), = play(level, [RIGHT])
    assert (grid == level).all()
    assert reward == pytest.approx(STEP) and not done


def test_box_onto_target_pays_one(play):
    level = levels.parse("@$.-\n--$.")
    out = play(level, [RIGHT])
    assert levels.render(out[0][0]) == " @* \n  $."
    assert out[0][1] == pytest.approx(1 + STEP)
    assert not out[0][2]


def test_box_off_target_costs_one(play):
    out = play(levels.parse("@*-$."), [RIGHT, RIGHT])
    assert levels.render(out[0][0]) == " +$$."
    assert [r for _, r, _ in out] == pytest.approx([STEP - 1, STEP])  # second push blocked by a box


def test_box_from_target_to_target_nets_zero(play):
    out = play(levels.parse("@*.\n$--"), [RIGHT])
    assert levels.render(out[0][0]) == " +*\n$  "
    assert out[0][1] == pytest.approx(STEP)


def test_solving_pays_bonus_and_ends(play):
    level = levels.parse("@$-.\n-$--\n-.--")
    # push the first box two cells onto its target, step back, push the second one down
    out = play(level, [RIGHT, RIGHT, LEFT, DOWN, UP])
    assert levels.render(out[3][0]) == "   *\n @  \n *  "
    assert [r for _, r, _ in out] == pytest.approx([STEP, STEP + 1, STEP, STEP + 1 + 10, 0.0])
    assert [d for _, _, d in out] == [False, False, False, True, True]
    assert (out[4][0] == out[3][0]).all()  # nothing moves once solved


def test_time_limit_ends_the_episode(play):
    out = play(levels.parse("@-$."), [LEFT, LEFT, LEFT, LEFT], max_steps=3)
    assert [d for _, _, d in out] == [False, False, True, True]
    assert [r for _, r, _ in out] == pytest.approx([STEP, STEP, STEP, 0.0])


# --- JAX env specifics ----------------------------------------------------------------------


def solved_state():
    state = _jit_reset(jnp.asarray(levels.parse("@$.")))
    state, reward, done = _jit_step(state, RIGHT, 10)
    assert bool(done) and bool(state.solved) and float(reward) == pytest.approx(STEP + 11)
    return state


def test_step_after_done_is_a_no_op():
    state = solved_state()
    for action in range(4):
        after, reward, done = _jit_step(state, action, 10)
        assert float(reward) == 0.0 and bool(done)
        for old, new in zip(state, after):
            assert (np.asarray(old) == np.asarray(new)).all()


def test_reset_and_cells_round_trip():
    for level in levels.make_level_set(5, 20, 6, 7, 2):
        assert (np.asarray(_jit_cells(_jit_reset(level))) == level).all()
    level = levels.parse("+$\n-*\n$.")  # agent and a box each start on a target
    assert (np.asarray(_jit_cells(_jit_reset(level))) == level).all()


def test_observation_is_one_hot_plus_clock():
    level = levels.parse("@---\n#$-.")
    state = _jit_reset(jnp.asarray(level))
    state, _, _ = _jit_step(state, RIGHT, 8)
    state, _, _ = _jit_step(state, RIGHT, 8)
    obs = np.asarray(_jit_observe(state, 8))
    assert obs.shape == (2, 4, env.N_CHANNELS) and obs.dtype == np.float32
    assert (obs[..., :7].sum(-1) == 1).all()
    assert (obs[..., :7].argmax(-1) == np.asarray(_jit_cells(state))).all()
    assert levels.render(obs[..., :7].argmax(-1)) == "  @ \n#$ ."
    assert np.allclose(obs[..., 7], 2 / 8)


def test_cell_codes_and_rewards_match_between_modules():
    names = ["FLOOR", "WALL", "TARGET", "AGENT", "BOX", "AGENT_ON_TARGET", "BOX_ON_TARGET", "N_CODES",
             "STEP_PENALTY", "BOX_ON_TARGET_REWARD", "BOX_OFF_TARGET_PENALTY", "SOLVE_BONUS"]
    for name in names:
        assert getattr(env, name) == getattr(levels, name), name
    from evaluators.jaxtrain.station_jax.sokoban_env import _MOVES  # private: not through the lazy module

    assert (_MOVES == np.array(levels.MOVES)).all()


def test_jit_and_vmap_over_a_batch():
    batch = levels.make_level_set(7, 16, 6, 6, 2)
    actions = np.random.default_rng(0).integers(0, 4, size=(12, 16))
    states = jax.jit(jax.vmap(env.reset))(jnp.asarray(batch))
    step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, None)), static_argnums=2)
    rewards = []
    for row in actions:
        states, reward, done = step(states, jnp.asarray(row), 10)
        assert reward.shape == (16,) and reward.dtype == jnp.float32 and done.shape == (16,)
        rewards.append(np.asarray(reward))
    grids = np.asarray(jax.jit(jax.vmap(env.cells))(states))
    for i, level in enumerate(batch):
        expected = play_numpy(level, actions[:, i], max_steps=10)
        assert (grids[i] == expected[-1][0]).all()
        assert np.allclose([r[i] for r in rewards], [r for _, r, _ in expected], atol=1e-5)
    assert bool(states.done.all())  # 12 steps with a limit of 10


def test_step_autoreset_restarts_from_the_given_level():
    level = jnp.asarray(levels.parse("@$.\n---"))
    fresh = jnp.asarray(levels.parse("--.\n@$-"))
    state = _jit_reset(level)
    state, obs, reward, done = _jit_autoreset(state, DOWN, 10, fresh)  # episode goes on
    assert not bool(done) and levels.render(np.asarray(_jit_cells(state))) == " $.\n@  "
    state, obs, reward, done = _jit_autoreset(_jit_reset(level), RIGHT, 10, fresh)  # solves
    assert bool(done) and float(reward) == pytest.approx(STEP + 11)
    assert (np.asarray(_jit_cells(state)) == np.asarray(fresh)).all() and int(state.t) == 0
    assert (np.asarray(obs) == np.asarray(_jit_observe(_jit_reset(fresh), 10))).all()


# --- cross-check: JAX env against the reference, on generated levels ------------------------


@pytest.mark.parametrize("shape", [(5, 5, 1), (6, 6, 2), (7, 8, 3)])
def test_jax_env_agrees_with_reference(shape):
    height, width, n_boxes = shape
    count, horizon, max_steps = 24, 120, 110
    batch, solutions = levels.make_level_set(11, count, height, width, n_boxes, with_solutions=True)
    rng = np.random.default_rng(list(shape))
    actions = rng.integers(0, 4, size=(count, horizon))
    for i in range(0, count, 2):  # half the episodes start with the known solution: solves get checked too
        prefix = solutions[i][:horizon]
        actions[i, : len(prefix)] = prefix

    def episode(level, acts):
        def body(state, action):
            state, reward, done = env.step(state, action, max_steps)
            return state, (reward, done, state.solved)
        return jax.lax.scan(body, env.reset(level), acts)[1]

    rewards, dones, solved = jax.jit(jax.vmap(episode))(jnp.asarray(batch), jnp.asarray(actions))
    n_solved = 0
    for i in range(count):
        expected = play_numpy(batch[i], actions[i], max_steps)
        assert np.allclose(np.asarray(rewards[i]), [r for _, r, _ in expected], atol=1e-5), i
        assert np.asarray(dones[i]).tolist() == [d for _, _, d in expected], i
        result = levels.replay(batch[i], actions[i], max_steps)
        assert result["solved"] == bool(solved[i, -1])
        assert result["return"] == pytest.approx(float(rewards[i].sum()), abs=1e-4)
        n_solved += result["solved"]
    assert n_solved >= count // 4  # most known solutions fit in the horizon


# --- reference verifier ---------------------------------------------------------------------


def test_replay_stops_at_the_solve_and_honours_max_steps():
    level = levels.parse("@$.-")
    assert levels.replay(level, [LEFT, RIGHT, LEFT, LEFT], 10) == {
        "solved": True, "steps": 2, "return": pytest.approx(2 * STEP + 11)}
    assert levels.replay(level, [LEFT, RIGHT], 1) == {"solved": False, "steps": 1, "return": pytest.approx(STEP)}
    assert levels.replay(level, [], 5) == {"solved": False, "steps": 0, "return": 0.0}


@pytest.mark.parametrize("actions", [[0, 4], [-1], [1.0], [[1, 2]], ["1"]])
def test_replay_rejects_bad_actions(actions):
    with pytest.raises(ValueError):
        levels.replay(levels.parse("@$.-"), actions, 10)


@pytest.mark.parametrize("text", ["-$.", "@@$..", "@$$.", "@*", "@$x"])
def test_replay_rejects_bad_levels(text):
    with pytest.raises(ValueError):
        levels.replay(levels.parse(text.replace("x", "-")), [1], 10)


# --- generator ------------------------------------------------------------------------------


def floor_is_connected(level) -> bool:
    open_cells = {tuple(cell) for cell in np.argwhere(level != levels.WALL).tolist()}
    start = next(iter(open_cells))
    seen, queue = {start}, collections.deque([start])
    while queue:
        row, col = queue.popleft()
        for drow, dcol in levels.MOVES:
            near = (row + drow, col + dcol)
            if near in open_cells and near not in seen:
                seen.add(near)
                queue.append(near)
    return seen == open_cells


@pytest.mark.parametrize("shape", [(5, 5, 1), (6, 6, 2), (8, 8, 3)])
def test_generated_levels_are_valid_and_solved_by_their_solutions(shape):
    height, width, n_boxes = shape
    batch, solutions = levels.make_level_set(3, 200, height, width, n_boxes, with_solutions=True)
    assert batch.shape == (200, height, width) and batch.dtype == np.int8
    for level, solution in zip(batch, solutions):
        levels.validate(level)
        assert np.isin(level, (levels.BOX, levels.BOX_ON_TARGET)).sum() == n_boxes
        assert not (level == levels.BOX_ON_TARGET).any()  # the generator leaves every box off target
        assert floor_is_connected(level)
        assert solution.dtype == np.int8 and solution.ndim == 1
        result = levels.replay(level, solution, len(solution))
        assert result["solved"] and result["steps"] == len(solution)
    assert len({level.tobytes() for level in batch}) == len(batch)  # different across indices


def test_level_sets_are_deterministic():
    first = levels.make_level_set(42, 10, 6, 6, 2)
    again, solutions = levels.make_level_set(42, 12, 6, 6, 2, with_solutions=True)
    assert (first == again[:10]).all()  # level i depends on (seed, i) only
    assert not (first == levels.make_level_set(43, 10, 6, 6, 2)).all()
    level, solution = levels.generate_level(np.random.default_rng([42, 3]), 6, 6, 2)
    assert (level == first[3]).all() and (solution == solutions[3]).all()


def test_random_policy_rarely_solves_small_levels():
    """Levels are not trivial: random play solves few 6x6 two-box levels in 60 steps
    (about 2% when measured)."""
    batch = levels.make_level_set(9, 200, 6, 6, 2)
    rng = np.random.default_rng(0)
    solved = [levels.replay(level, rng.integers(0, 4, size=60), 60)["solved"] for level in batch]
    assert np.mean(solved) < 0.2
