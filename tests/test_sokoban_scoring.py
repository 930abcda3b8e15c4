"""Sokoban's two-stage scoring without the sandbox: the policy step the harness exports for one
environment acts exactly as the network does in a batch (recurrent state and its reset
included); the station's scoring mode plays every level on its own (a level's actions do not
depend on which other levels are played); what the station counts is its own replay of the
actions, and outputs that cannot count are refused in one line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import run_folder, shared_task_data
from lazy_modules import Lazy, made_on_first_call

from evaluators.base import create_task
from evaluators.jaxtrain.station_jax.hooks import ContractError
from evaluators.jaxtrain.station_jax.scoring import MODES
from evaluators.jaxtrain.station_jax.verify import check_exported
from evaluators.sokoban.levels import make_level_set

# imported by the first test that uses them, not at collection
jax, jnp, nn, export = Lazy("jax"), Lazy("jax.numpy"), Lazy("flax.linen"), Lazy("jax.export")
harness, env = Lazy("evaluators.jaxtrain.station_jax.sokoban"), Lazy("evaluators.jaxtrain.station_jax.sokoban_env")
policies = Lazy("sokoban_policies")  # Recurrent, Stateless, Sharp

TINY = {"grid": 5, "boxes": 1, "train_levels": 300, "eval_levels": 40, "max_steps": 30, "trials": 2}
STEPS = 30
MEMORY = 64


@pytest.fixture(scope="module", autouse=True)
def compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """JAX's persistent compilation cache, one per test run: the scorer's play loop, compiled anew
    for every play as the station's scorer does once per trial, is compiled once per shape here
    and loaded after (the same executable)."""
    from jax.experimental.compilation_cache import compilation_cache

    folder = run_folder(tmp_path_factory) / "jax-compiled"
    folder.mkdir(exist_ok=True)
    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    before = {name: jax.config.values[name] for name in names}
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    compilation_cache.reset_cache()  # the cache is set up at the first compilation: here, with this folder
    yield folder
    for name, value in before.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()


@pytest.fixture(scope="module")
def levels() -> np.ndarray:
    return make_level_set(3, 12, 5, 5, 1)


# The batched side compiled, as training runs it (inside jit): one compilation each instead of one
# per operation, most of these tests' CPU.
reset_all = made_on_first_call(lambda: jax.jit(jax.vmap(env.reset)))
observe_all = made_on_first_call(lambda: jax.jit(jax.vmap(lambda s: env.observe(s, STEPS))))
step_all = made_on_first_call(lambda: jax.jit(jax.vmap(lambda s, a: env.step(s, a, STEPS))))


def batched(network: nn.Module):
    """The network called on a batch as the harness calls it, compiled."""
    return jax.jit(lambda params, obs, starts, rnn: harness.call_network(network, params, obs, starts, rnn))


def setting(network: nn.Module, levels: np.ndarray):
    """(params, the exported policy, its rnn state for a batch of 2) as the harness makes them."""
    obs = observe_all(reset_all(jnp.asarray(levels[:2])))
    starts = jnp.ones(2, bool)
    params = jax.jit(network.init)(jax.random.PRNGKey(0), obs, starts)
    _, _, rnn = batched(network)(params, obs, starts, None)
    raw = harness.export_policy(network, params, (5, 5, 8), rnn, 2, MEMORY)
    exported = export.deserialize(bytearray(raw))
    check_exported(exported, *spec())
    return params, exported


def spec() -> tuple[list, list]:
    return [((5, 5, 8), "float32"), ((), "bool"), ((MEMORY,), "float32")], [((4,), "float32"), ((MEMORY,), "float32")]


@pytest.mark.parametrize("kind", ["Recurrent", "Stateless"], ids=["recurrent", "stateless"])
def test_the_exported_step_acts_as_the_network_does_in_a_batch(levels: np.ndarray, kind: str) -> None:
    network = getattr(policies, kind)()
    params, exported = setting(network, levels)
    leaves = jax.tree_util.tree_leaves(params)
    batch = jnp.asarray(levels[:3])
    states = reset_all(batch)
    obs = observe_all(states)
    starts = jnp.ones(3, bool)
    # the batched play as training and the one-stage evaluation did it: the state made from None first
    call = batched(network)
    _, _, rnn = call(params, obs, starts, None)
    memories = [jnp.zeros(MEMORY, jnp.float32)] * 3
    for t in range(6):
        logits, _, rnn = call(params, obs, starts, rnn)
        for i in range(3):
            one, memories[i] = exported.call(*leaves, obs[i], starts[i], memories[i])
            np.testing.assert_allclose(np.asarray(one), np.asarray(logits[i]), rtol=1e-5, atol=1e-5)
        actions = jnp.asarray([(t + i) % 4 for i in range(3)])
        states, _, _ = step_all(states, actions)
        obs = observe_all(states)
        starts = jnp.zeros(3, bool).at[1].set(t == 3)  # env 1 starts over: its state resets as in training
    assert np.asarray(memories[0])[16:].tolist() == [0.0] * (MEMORY - 16)  # the state, then zero padding


def play(exported, params, levels: np.ndarray, folder: Path, seed: int = 0) -> np.ndarray:
    folder.mkdir(exist_ok=True)
    np.save(folder / "eval_levels.npy", levels)
    settings = {"mode": "sokoban", "inputs": [[list(s), d] for s, d in spec()[0]], "max_steps": STEPS, "seed": seed}
    return MODES["sokoban"](exported, settings, str(folder))(jax.tree_util.tree_leaves(params))["output_0"]


def test_each_level_is_played_on_its_own(levels: np.ndarray, tmp_path: Path) -> None:
    """A policy with memory that never forgets by itself: its actions on a level are the same
    whichever levels come before it, so nothing of one level reaches the next."""
    params, exported = setting(policies.Sharp(), levels)
    forward = play(exported, params, levels, tmp_path / "forward")
    backward = play(exported, params, levels[::-1], tmp_path / "backward")
    assert forward.shape == (12, STEPS) and forward.dtype == np.int8
    assert np.array_equal(forward, backward[::-1])
    alone = play(exported, params, levels[5:6], tmp_path / "alone")
    assert np.array_equal(alone[0], forward[5])


def test_actions_are_sampled_with_the_station_s_keys(levels: np.ndarray, tmp_path: Path) -> None:
    params, exported = setting(policies.Stateless(), levels)
    first = play(exported, params, levels, tmp_path / "a", seed=0)
    again = play(exported, params, levels, tmp_path / "b", seed=0)
    other = play(exported, params, levels, tmp_path / "c", seed=1)
    assert np.array_equal(first, again) and not np.array_equal(first, other)
    assert set(np.unique(first)) <= {0, 1, 2, 3}


@pytest.mark.parametrize("state, words", [
    (lambda b: jnp.zeros((b, 100)), "holds 100 numbers per environment; this task carries at most 64"),
    (lambda b: jnp.zeros((7,)), "must have the batch (2) as its first axis"),
])
def test_a_state_the_station_cannot_carry_is_a_contract_error(levels: np.ndarray, state, words: str) -> None:
    class Odd(nn.Module):
        @nn.compact
        def __call__(self, obs, done, rnn_state=None):
            logits = nn.Dense(4)(obs.reshape((obs.shape[0], -1)))
            return logits, logits[:, 0], state(obs.shape[0]) if rnn_state is None else rnn_state

    network = Odd()
    obs = observe_all(reset_all(jnp.asarray(levels[:2])))
    params = jax.jit(network.init)(jax.random.PRNGKey(0), obs, jnp.ones(2, bool))
    with pytest.raises(ContractError, match=words.replace("(", r"\(").replace(")", r"\)")):
        harness.export_policy(network, params, (5, 5, 8), state(2), 2, MEMORY)


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    with shared_task_data(tmp_path_factory, "sokoban"):  # the levels made once per test run
        task = create_task("sokoban", TINY)
        task.levels.ensure()
        yield task


def test_the_station_counts_solves_by_its_own_replay(task) -> None:
    held = task.levels.eval_levels()
    idle = np.zeros((len(held), STEPS), np.int8)  # walking up into the wall: solves nothing
    measured = task.measure(0, {"output_0": idle})
    assert measured["score"] == pytest.approx(100 * task.levels.solved(idle, STEPS).mean())
    assert measured["line"].startswith(f"solved {int(task.levels.solved(idle, STEPS).sum())} of 40 held-out levels")


@pytest.mark.parametrize("outputs, words", [
    ({"output_0": np.zeros((3, STEPS), np.int8)}, "action sequences of shape (3, 30), expected (40, steps)"),
    ({"output_0": np.full((40, STEPS), 7, np.int8)}, "actions must be 0 (up), 1 (right), 2 (down) or 3 (left)"),
    ({}, "action sequences of shape None"),
])
def test_outputs_that_cannot_count_are_refused_in_one_line(task, outputs: dict, words: str) -> None:
    with pytest.raises(ValueError) as err:
        task.measure(0, outputs)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_the_scorer_is_told_the_policy_s_shapes_and_the_station_s_sampling(task) -> None:
    example = task.example_spec(1)
    assert example.inputs == [((5, 5, 8), "float32"), ((), "bool"), ((16384,), "float32")]
    assert example.outputs == [((4,), "float32"), ((16384,), "float32")]
    assert task.scorer_settings(1) == {"mode": "sokoban", "max_steps": 30, "seed": 1}
    rule = task.stop_rule(0)
    assert (rule.patience, rule.max_checkpoints) == (None, 1)
    assert task.failed_trial_score == 0.0
