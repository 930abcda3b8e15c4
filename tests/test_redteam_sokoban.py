"""Red team: forging the Sokoban score, through the real sandbox, CPU, tiny budgets counted in env
steps. Before two-stage scoring the training run had the held-out levels mounted and the policy
that played them was its own code: breadth-first search over `eval_levels.npy` inside the
"network" scored 100% (honest baseline 34% at the CPU config). Now the run sees the training
levels only and hands over an exported policy step; the station plays the held-out levels itself.

The attacks: the same BFS lookup (it finds no held-out level; given a leaked copy, the very same
code scores 100%, so the attack is real); a forged export that calls back into Python; a table of
solutions embedded in the exported code; replacing the harness's entry point; crashing a seed on
purpose while bragging in the report. Each is refused or scores no better than the honest
baseline, which scores as it did before (the number below: measured on the tests' keyed levels).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import shared_task_data
from test_sokoban_task import TINY, baseline_run  # the task's own budgets; its baseline run is shared

from evaluators.base import create_task
from station.core.config import ExecutorConfig
from station.core.run_types import Mount
from station.executors import create_executor

NO_TRAINING = {"env_steps": 128, "trials": 1}  # one update: for attacks that need no learning
# the tests' keyed levels, same seeds and budgets: 4 and 6 of 40 held-out levels solved (on the old
# seed-0 levels the one-stage harness solved 5 and 5: the same 12.5). Each level is one sampled
# episode, so two runs with other sampling keys differ by a few levels: the bound is two binomial
# standard deviations of 80 episodes at that rate.
BEFORE, NOISE = 12.5, 7.5
HEAD = '''import glob, json, os
import numpy as np
import jax, jax.numpy as jnp
import flax.linen as nn
SETTINGS = json.loads(os.environ.get("STATION_TRIAL", '{"trial": 0, "phase": "check"}'))
TRAINING = SETTINGS["phase"] == "train"
'''
# Breadth-first search over every level file it can find, a table of shortest solutions keyed by the
# level, and a "network" that looks its level up at the first observation and plays the stored plan.
BFS_ATTACK = HEAD + '''
from collections import deque

MOVES = [(-1, 0), (0, 1), (1, 0), (0, -1)]
STEPS = 30


def solve(level):
    """The shortest action sequence that puts every box on a target, by breadth-first search."""
    height, width = level.shape
    free = lambda r, c: 0 <= r < height and 0 <= c < width and level[r, c] != 1
    targets = np.isin(level, (2, 5, 6))
    agent = tuple(int(v) for v in np.argwhere(np.isin(level, (3, 5)))[0])
    start = (agent, frozenset(tuple(int(v) for v in b) for b in np.argwhere(np.isin(level, (4, 6)))))
    came = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        (r, c), boxes = state
        if all(targets[b] for b in boxes):
            plan = []
            while came[state] is not None:
                state, action = came[state]
                plan.append(action)
            return plan[::-1]
        for action, (dr, dc) in enumerate(MOVES):
            ahead = (r + dr, c + dc)
            if not free(*ahead):
                continue
            moved = boxes
            if ahead in boxes:
                beyond = (ahead[0] + dr, ahead[1] + dc)
                if not free(*beyond) or beyond in boxes:
                    continue
                moved = (boxes - {ahead}) | {beyond}
            nxt = (ahead, moved)
            if nxt not in came:
                came[nxt] = (state, action)
                queue.append(nxt)
    return []


def found_levels():
    found = {}
    for pattern in PLACES:
        for path in glob.glob(pattern, recursive=True):
            try:
                found[path] = np.load(path)
            except (OSError, ValueError):
                pass
    return found


FOUND = found_levels()
if os.path.isdir("probe"):
    with open(f"probe/{SETTINGS['phase']}{SETTINGS['trial']}.json", "w") as f:
        json.dump({"found": sorted(FOUND), "data": sorted(os.listdir("task_data/sokoban"))}, f)
LEVELS = np.concatenate(list(FOUND.values())) if FOUND else np.load("task_data/sokoban/train_levels.npy")
KEYS = np.eye(7, dtype=np.float32)[LEVELS].reshape(len(LEVELS), -1)
PLANS = np.zeros((len(LEVELS), STEPS), np.int32)
for i, level in enumerate(LEVELS):
    plan = solve(level)[:STEPS]
    PLANS[i, : len(plan)] = plan


class Lookup(nn.Module):
    @nn.compact
    def __call__(self, obs, done, rnn_state=None):
        keys, plans = TABLES(self)
        batch = obs.shape[0]
        match = jnp.argmax(obs[..., :7].reshape((batch, -1)) @ keys.T, axis=1).astype(jnp.float32)
        level = jnp.where(done, match, jnp.zeros(batch) if rnn_state is None else rnn_state)
        t = jnp.clip(jnp.round(obs[:, 0, 0, 7] * STEPS).astype(jnp.int32), 0, STEPS - 1)
        action = jnp.asarray(plans)[level.astype(jnp.int32), t].astype(jnp.int32)
        return 1e4 * jax.nn.one_hot(action, 4), jnp.zeros(batch), level


def TABLES(module):  # in the parameters: the checkpoint carries them
    return (module.param("keys", lambda k: jnp.asarray(KEYS)), module.param("plans", lambda k: jnp.asarray(PLANS, jnp.float32)))


def create_network(hparams):
    return Lookup()


def training_step(network, optimizer, params, opt_state, batch, hparams):
    return params, opt_state  # the table is the policy: nothing to learn
'''


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    with shared_task_data(tmp_path_factory, "sokoban"):  # the levels made once per test run
        task = create_task("sokoban", TINY)
        task.levels.ensure()
        executor = create_executor(ExecutorConfig(kind="local"), hide=task.private_paths())
        yield executor
        executor.close()


def evaluate(executor, code: str, mounts: list[Mount] | None = None, **params):
    task = create_task("sokoban", {**TINY, **params})
    result = task.execute(executor, code, mounts=mounts or [], label="redteam-sokoban")
    return task, result, (task.score(result) if result.status == "ok" else None)


def bfs_attack(places: list[str]) -> str:
    return BFS_ATTACK.replace("\nMOVES = ", f"\nPLACES = {places!r}\nMOVES = ", 1)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, local):
    result, verdict = baseline_run(tmp_path_factory, local)  # the same TINY run, made once per test run
    assert verdict is not None and verdict.success, (result.error, result.stderr[-3000:])
    return result, verdict


def test_the_honest_baseline_scores_as_before(baseline) -> None:
    result, verdict = baseline
    assert abs(verdict.score - BEFORE) <= NOISE, verdict.details
    assert "scored by the station from their checkpoints" in verdict.details
    assert "Reported by the run: 3,968 env steps" in verdict.details


def test_breadth_first_search_over_the_level_files_finds_no_held_out_level(local, tmp_path: Path) -> None:
    """The attack of the issue. It looks where the held-out levels were (the data mount) and where
    the station keeps them, then solves whatever it found: only the training levels are there,
    and their solutions do not solve levels it has never seen. It does no better than playing at
    random, within the noise of one episode per level (the tiny budget's baseline is no better than
    random either; the bar that holds at every budget is the random policy's)."""
    task = create_task("sokoban", TINY)
    held = task.levels.held_out_dir
    places = ["task_data/sokoban/eval_levels.npy", "**/eval_levels.npy", str(held / "eval_levels.npy"),
              str(task.levels.dir / "**" / "eval_levels.npy")]
    probe = tmp_path / "probe"
    probe.mkdir()
    probe.chmod(0o777)
    _, result, verdict = evaluate(local, bfs_attack(places), mounts=[Mount(probe, "probe", writable=True)],
                                  **NO_TRAINING)
    assert verdict is not None and verdict.success, result.stderr[-3000:]
    seen = {p.name: json.loads(p.read_text()) for p in probe.iterdir()}
    assert set(seen) == {"check0.json", "train0.json"}  # the submission never runs where the levels are
    assert all(s == {"found": [], "data": ["train_levels.npy"]} for s in seen.values())
    # the plans of the nearest training levels solve a few held-out ones by chance, as random play
    # does: on the tests' keyed levels 5 of 40 (random play 4 of 40), within the noise of single episodes
    assert verdict.score <= 100 * task.levels.random_solve_rate(TINY["max_steps"]) + NOISE, verdict.details


def test_the_same_search_given_a_leaked_copy_solves_every_level(local, tmp_path: Path) -> None:
    """The control: the attack is real. Were the held-out levels ever in the run (here through a
    mount this test adds on purpose), the same code would score 100."""
    task = create_task("sokoban", TINY)
    leak = Mount(task.levels.held_out_dir, "leak")
    _, result, verdict = evaluate(local, bfs_attack(["leak/eval_levels.npy"]), mounts=[leak], **NO_TRAINING)
    assert verdict is not None and verdict.success, result.stderr[-3000:]
    assert verdict.score == 100.0


def test_a_table_of_solutions_inside_the_exported_policy_is_refused(local) -> None:
    """The lookup with its table in the code instead of the parameters: what a policy learnt must
    travel in the checkpoint, which is capped and counted; a big constant is refused."""
    code = bfs_attack(["task_data/sokoban/*.npy"]).replace(
        '''def TABLES(module):  # in the parameters: the checkpoint carries them
    return (module.param("keys", lambda k: jnp.asarray(KEYS)), module.param("plans", lambda k: jnp.asarray(PLANS, jnp.float32)))''',
        '''PADDED = np.concatenate([KEYS, np.zeros((4000, KEYS.shape[1]), np.float32)])  # room for more levels: 2.8 MB


def TABLES(module):  # inside the code: constants of the exported function
    module.param("bias", nn.initializers.zeros, (1,))
    return jnp.asarray(PADDED), jnp.asarray(np.concatenate([PLANS, np.zeros((4000, STEPS), np.int32)]))''')
    assert "PADDED" in code
    _, result, verdict = evaluate(local, code, **NO_TRAINING)
    assert verdict is not None and verdict.success and verdict.score == 0.0, result.stderr[-3000:]
    assert "embeds" in verdict.details and "bytes of constants" in verdict.details


def test_a_policy_that_prints_cannot_even_be_exported(local) -> None:
    code = HEAD + '''

class Printing(nn.Module):
    @nn.compact
    def __call__(self, obs, done, rnn_state=None):
        jax.debug.print("{}", obs.sum())
        x = nn.Dense(4)(obs.reshape((obs.shape[0], -1)))
        return x, x[:, 0]


def create_network(hparams):
    return Printing()
'''
    _, result, _ = evaluate(local, code, **NO_TRAINING)
    assert result.status == "error" and "host_callbacks" in result.error
    assert "trials" not in (result.value or {})


def test_a_forged_export_with_a_host_callback_is_refused_by_the_station(local) -> None:
    """The harness's export replaced by one whose module calls back into Python (built by hand
    past JAX's own refusal): the station's scorer refuses it before running it; the seed counts 0."""
    code = HEAD + '''
import dataclasses
import station_jax.sokoban as h
from jax import export
from jax._src.interpreters import mlir
from jax._src.lib import _jax


def forged(network, params, obs_shape, rnn, batch, memory):
    specs = [jax.ShapeDtypeStruct(leaf.shape, leaf.dtype) for leaf in jax.tree_util.tree_leaves(params)]
    specs += [jax.ShapeDtypeStruct(obs_shape, jnp.float32), jax.ShapeDtypeStruct((), jnp.bool_),
              jax.ShapeDtypeStruct((memory,), jnp.float32)]
    out = jax.ShapeDtypeStruct((4,), jnp.float32)

    def calls_back(*args):
        return jax.pure_callback(lambda o: np.zeros(4, np.float32), out, args[-3]), args[-1]

    def honest_looking(*args):
        return jnp.zeros(4, jnp.float32) + 0 * args[-3].sum(), args[-1]

    plain = export.export(jax.jit(honest_looking), platforms=["cpu"])(*specs)
    module = jax.jit(calls_back).lower(*specs).compiler_ir("stablehlo")
    artifact = _jax.mlir.serialize_portable_artifact(mlir.module_to_bytecode(module), "1.0.0")
    return bytes(dataclasses.replace(plain, mlir_module_serialized=artifact).serialize())


h.export_policy = forged


class Small(nn.Module):
    @nn.compact
    def __call__(self, obs, done, rnn_state=None):
        x = nn.Dense(4)(obs.reshape((obs.shape[0], -1)))
        return x, x[:, 0]


def create_network(hparams):
    return Small()
'''
    _, result, verdict = evaluate(local, code, **NO_TRAINING)
    assert result.status == "ok" and verdict is not None and verdict.score == 0.0, result.stderr[-3000:]
    assert "refused" in verdict.details and "host callback (xla_ffi_python_cpu_callback)" in verdict.details


def test_replacing_the_harness_entry_point_scores_nothing(local) -> None:
    """The run returns whatever it likes: a solve rate, action sequences, a curve. The station has
    no policy to play, so each seed counts as 0 solved."""
    code = HEAD + '''
import station_jax.sokoban as h


def fake(ns):
    if not TRAINING:
        return {"checked": True}
    return {"seed": SETTINGS["trial"], "env_steps": 50_000_000, "stop": "step-budget", "claimed_solved": 40,
            "eval_actions": np.zeros((40, 30), np.int8), "train_curve": [[1, 1.0]]}


h.main = fake


def create_network(hparams):
    return nn.Dense(4)
'''
    _, result, verdict = evaluate(local, code)
    assert result.status == "ok" and verdict is not None, result.stderr[-3000:]
    assert verdict.score == 0.0 and "(2 failed, counted as 0.0)" in verdict.details
    assert "the run ended before it exported its apply function" in verdict.details


def test_crashing_a_seed_on_purpose_counts_it_as_nothing_solved(local, baseline) -> None:
    """Trial 1 crashes on purpose (dropped from the mean, it would leave the better seed alone) and
    trial 0 trains honestly but brags in its report. The crash counts 0; the report changes nothing:
    trial 0 scores exactly what the honest baseline's trial 0 scored."""
    code = create_task("sokoban", TINY).baselines()[0].code + '''
import json as _json, os as _os
import station_jax.sokoban as _h

_honest, _train = create_network, _h.train


def create_network(hparams):
    settings = _json.loads(_os.environ["STATION_TRIAL"])
    if settings["phase"] == "train" and settings["trial"] == 1:
        raise RuntimeError("this seed looked worse")
    return _honest(hparams)


def bragging(*args):
    return {**_train(*args), "claimed_solved": 40, "solve_rate": 1.0, "env_steps": 50_000_000}


_h.train = bragging
'''
    _, result, verdict = evaluate(local, code)
    assert result.status == "ok" and verdict is not None, result.stderr[-3000:]
    honest = baseline[0].value["trials"][0]["station"]["best"]["score"]
    assert result.value["trials"][0]["station"]["best"]["score"] == honest
    assert verdict.score == round(honest / 2, 1)
    assert "(1 failed, counted as 0.0)" in verdict.details and "this seed looked worse" in verdict.details
    assert "Reported by the run: 50,000,000 env steps" in verdict.details  # its claim, shown as its claim
