"""Sokoban RL (spec research §3.3), model-free, on our generated levels at a size this machine can train.

Agents supply a network (and may replace the update with `training_step`); the harness trains
`trials` seeds on the training levels only, for a fixed budget of environment steps or time, and
hands over the policy for one environment (exported, StableHLO) and its final parameters. The
station scores in two stages (jaxtrain/two_stage.py): its own scorer, in a sandbox that runs none
of the submission's code, plays each held-out level once with that policy (one action per
observation, sampled from the policy's logits with the station's keys; station_jax/
sokoban_scoring.py), and the station replays the action sequences on its own copy of the levels
with the trusted rules (levels.replay) to count solves. No run ever holds the held-out levels.
Primary score: mean solve rate x 100; a trial without a measured policy counts 0.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

from ..base import Baseline, register
from ..jaxtrain.two_stage import ExampleSpec, StopRule, TwoStageTask
from .dataset import BoxobanLevelSet, LevelSet, data_root
from .levels import MOVES, N_CODES
from .play import submission as scripted_play

N_CHANNELS = N_CODES + 1  # an observation: the one-hot of the cell codes, then the clock (sokoban_env.py)
DEFAULT_MEMORY = 16384  # floats of recurrent state the exported policy may carry per level (DRC(3,3) on 8x8: 12,288)


@register("sokoban")
class Sokoban(TwoStageTask):
    title = "Sokoban Reinforcement Learning"
    description = "Train a model-free agent that solves unseen Sokoban levels."
    harness_module = "sokoban"
    data_target = "task_data/sokoban"
    display_precision = 1
    curve_x_label = "env steps"  # the harness reports [env steps, training solve rate] every 100 updates
    failed_trial_score = 0.0  # a trial without a measured policy solved nothing: it counts, as 0

    @classmethod
    def scripted_submission(cls, shown_title: str, seen: Any, rng: random.Random) -> dict[str, str] | None:
        return scripted_play(seen, rng)

    @classmethod
    def new_station_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """A new station on a level folder records the reference's draw unless it names one; a station
        made before the draw had a name keeps `paper`, the default its stored config implies."""
        if params.get("levels") is not None and "eval_draw" not in params:
            return {**params, "eval_draw": "reference"}
        return params

    def __init__(
        self,
        grid: int = 6,
        boxes: int = 2,
        train_levels: int = 20_000,
        eval_levels: int = 500,
        seed: int = 0,
        max_steps: int = 80,
        n_envs: int = 64,
        unroll: int = 20,
        env_steps: int = 50_000_000,
        trials: int = 4,
        trial_budget_s: float = 600.0,
        trial_cpus: float = 1.0,
        gpus_per_trial: float | None = None,
        grace_s: float = 300.0,
        memory_mb: int | None = 6144,
        levels: str | None = None,
        memory_size: int = DEFAULT_MEMORY,
        eval_draw: str = "paper",
    ) -> None:
        """`levels`: a Boxoban-format level folder (train/, valid/, test/; docs in evaluators/sokoban/
        boxoban.py) instead of generated levels; grid and boxes then come from its files, and
        `eval_levels` are drawn from valid/ with `seed` by the rule `eval_draw` names (dataset.py
        `draw_indices`): `reference`, as the reference station's code draws (what a new station
        records), or an earlier rule, `paper` (what a station made without naming one draws) or `distinct`.
        `memory_size`: how many numbers of recurrent state the exported policy may carry from one
        step of a level to the next."""
        super().__init__(
            trials=trials,
            trial_budget_s=trial_budget_s,
            trial_cpus=trial_cpus,
            gpus_per_trial=gpus_per_trial,
            grace_s=grace_s,
            memory_mb=memory_mb,
        )
        if not 8 <= max_steps <= 1000 or not 1 <= n_envs <= 4096 or not 1 <= unroll <= 256 or env_steps < 1:
            raise ValueError("sokoban: max_steps 8..1000, n_envs 1..4096, unroll 1..256, env_steps >= 1")
        if not 1 <= memory_size <= 1 << 22:
            raise ValueError("sokoban: memory_size must be from 1 to 4194304")
        if levels is not None:
            self.levels: LevelSet = BoxobanLevelSet(data_root(), levels, eval=eval_levels, seed=seed, draw=eval_draw)
        else:
            self.levels = LevelSet(data_root(), grid=grid, boxes=boxes, train=train_levels, eval=eval_levels, seed=seed)
        self.max_steps, self.n_envs, self.unroll, self.env_steps = max_steps, n_envs, unroll, env_steps
        self.memory_size = memory_size

    # -- data ----------------------------------------------------------------------------------------------
    def data_dir(self) -> Path:
        return self.levels.ensure().train_dir  # the training levels only

    def private_paths(self) -> list[Path]:
        return self.levels.private_paths()

    def trial_settings(self) -> dict[str, Any]:
        return {
            "max_steps": self.max_steps,
            "n_envs": self.n_envs,
            "unroll": self.unroll,
            "env_steps": self.env_steps,
            "memory_size": self.memory_size,
        }

    # -- the paper's external evaluation ----------------------------------------------------------------
    def external_seeds(self) -> int:
        return 10

    def external_changes(self) -> str:
        """The paper: batch size 32 instead of 64 and no 45-minute limit (here: twice the budget,
        since every run needs one). The levels: with the reference's draw, test/'s as the reference
        draws them (`BoxobanLevelSet.test_set`); otherwise, or without a test/, the same held-out ones."""
        self.n_envs, self.trial_budget_s = 32, 2 * self.trial_budget_s
        self.timeout_s = self.trial_budget_s + self.grace_s
        changes = (
            f"32 environments per batch, {self.trial_budget_s / 60:g} minutes per trial (twice the internal budget)"
        )
        if not isinstance(self.levels, BoxobanLevelSet) or self.levels.draw != "reference":
            return f"{changes}, on the same held-out levels"
        test = self.levels.test_set()
        if test is None:
            return f"{changes}, on the same held-out levels (the level folder has no test/)"
        self.levels = test
        return f"{changes}, on {test.n_eval:,} levels of test/ (seed {test.seed}, as the reference draws them)"

    # -- two-stage scoring -----------------------------------------------------------------------------------
    def scoring_dir(self, trial: int) -> Path:
        return self.levels.ensure().held_out_dir

    def example_spec(self, trial: int) -> ExampleSpec:
        """One step of one environment: (obs, done, memory) -> (logits, memory)."""
        grid, memory = self.levels.grid, (self.memory_size,)
        return ExampleSpec(
            inputs=[((grid, grid, N_CHANNELS), "float32"), ((), "bool"), (memory, "float32")],
            outputs=[((len(MOVES),), "float32"), (memory, "float32")],
        )

    def scorer_settings(self, trial: int) -> dict[str, Any]:
        return {"mode": "sokoban", "max_steps": self.max_steps, "seed": trial}  # seed: the station's sampling keys

    def stop_rule(self, trial: int) -> StopRule:
        # one checkpoint, the final parameters: nothing is selected on the held-out levels
        return StopRule(None, 1, self.trial_budget_s, self.late_allowance_s())

    def measure(self, trial: int, outputs: dict[str, np.ndarray]) -> dict[str, Any]:
        """The held-out levels the policy's actions solve, replayed here under the trusted rules."""
        solved = self.levels.solved(outputs.get("output_0"), self.max_steps)
        rate = float(solved.mean())
        line = f"solved {int(solved.sum())} of {len(solved)} held-out levels: {rate:.1%}"
        return {"score": rate * 100.0, "metric": round(rate, 4), "metrics": {}, "line": line}

    def spec(self) -> str:
        return SPEC.format(
            levels=self.levels.describe(),
            grid=self.levels.grid,
            steps=self.max_steps,
            trials=self.trials,
            budget=self.trial_budget_s / 60,
            env_steps=self.env_steps,
            n_envs=self.n_envs,
            unroll=self.unroll,
            n_eval=self.levels.n_eval,
            target=self.data_target,
            memory=self.memory_size,
            random=self.levels.random_solve_rate(self.max_steps) * 100.0,
        )

    def baselines(self) -> list[Baseline]:
        code = (Path(__file__).parent / "baselines" / "cnn_pg.py").read_text(encoding="utf-8")
        return [
            Baseline(
                "CNN + Policy Gradient",
                ("baseline", "cnn", "a2c"),
                "A small convolutional actor-critic trained with the harness's default "
                "advantage actor-critic update (GAE, entropy bonus).",
                code,
            )
        ]

    # -- scoring ------------------------------------------------------------------------------------------
    def reported_line(self, reported: dict[str, Any]) -> str:
        """What the run says about its training, shown as its claim."""
        steps = reported.get("env_steps")
        parts = [
            f"{steps:,} env steps" if isinstance(steps, int) else f"{steps} env steps",
            f"{reported.get('seconds')} s",
            f"{reported.get('steps_per_second')} steps/s",
            f"stopped by {reported.get('stop')}",
        ]
        devices = reported.get("device")
        if isinstance(devices, list):
            parts.append("on " + ", ".join(str(d) for d in devices))
        return ", ".join(parts)

    def curve_panels(self) -> list[tuple[str, str, bool]]:
        return [("train_curve", "training solve rate (reported by the run)", False)]

    def summary(self, scored: list[dict[str, Any]]) -> tuple[float, dict[str, float | None], list[str]]:
        mean = float(np.mean([s["score"] for s in scored]))  # every trial, a failed one as 0
        random = self.levels.random_solve_rate(self.max_steps) * 100.0
        return round(mean, 1), {}, [f"A uniformly random policy solves {random:.1f}% of the same levels."]


SPEC = """# Sokoban Reinforcement Learning

Train a **model-free** agent that solves Sokoban levels it has never seen: push every box onto
a target. {levels}

## Environment
- Observation: a ({grid}, {grid}, 8) float array per environment: a one-hot over 7 cell types
  (0 floor, 1 wall, 2 target, 3 agent, 4 box, 5 agent on target, 6 box on target) plus channel
  7 = time step / {steps}. Outside the grid is wall.
- Actions: 0 up, 1 right, 2 down, 3 left. A box is pushed if the cell beyond it is free.
- Reward per step: −0.01; +1 for a box pushed onto a target, −1 for one pushed off; +10 when
  every box is on a target (the episode ends). Episodes end after {steps} steps.
- The environment and the training loop are in the read-only package `station_jax/`
  (`station_jax/sokoban_env.py`, `station_jax/sokoban.py`); the training levels are in
  `{target}/train_levels.npy`. The held-out levels are the station's: no run sees them.

## What to submit
`submission.py` with hooks; the harness runs the rollouts, the station the evaluation.
- `create_network(hparams)` (required): an object with `init(key, obs, done)` and
  `apply(params, obs, done, rnn_state=None)` returning `(logits (B, 4), value (B,), new_rnn_state)`
  (or just `(logits, value)` without memory). `done` (B,) marks the first observation of an
  episode, so a recurrent network can reset its state. With `rnn_state=None` a recurrent network
  starts from its initial state. Every array of the state has the batch as its first axis and
  keeps its shape and dtype; per environment it may hold at most {memory:,} numbers.
  The harness exports `apply` for one environment with `jax.export` (the logits and the state
  only); the station plays the held-out levels with that export. It must be plain JAX: host
  callbacks (`jax.pure_callback`, `jax.debug.print`), custom calls other than `jnp.linalg`'s, or
  more than 1 MiB of constants embedded in the code are refused (keep what you learn in the
  parameters).
- `training_step(network, optimizer, params, opt_state, batch, hparams)` -> `(params, opt_state)`
  (optional; six arguments; default: advantage actor-critic with GAE, γ = λ = 0.97). `batch` is
  batch-major: `observations` (B, T, ...), `actions`, `rewards`, `dones`, `starts`, `values`,
  `log_probs`, `final_values` (B,), `initial_rnn_states`, `rnn_states`.
- `create_optimizer(learning_rate)` (optional; default Adam, eps 1e-5), `_define_hyperparameters()`
  (defaults: learning_rate 4e-4, entropy_coef 0.01, value_coef 0.5, gamma 0.97, gae_lambda 0.97;
  `station_jax.hooks.choice/uniform/loguniform/randint` are drawn per trial), `complete(...)`,
  `BASE_SEED` (default 0).
Rules: choose one track (architecture or algorithm). No pretrained models, imitation learning,
offline RL, explicit model-based planning or Sokoban-specific heuristics; the training loop is
the harness's, and changing its functions changes nothing the station scores.

## Training and score
{trials} trials with seeds `BASE_SEED + trial`, in parallel; each trains on {n_envs} environments
x {unroll} steps per update for at most {env_steps:,} environment steps or {budget:g} minutes.
Then the harness hands the final parameters to the station, which plays each of the {n_eval}
held-out levels once, in a sandbox of its own (your code does not run there: only the exported
policy): one action per observation, sampled from the policy's logits, each level on its own
with a fresh state, at most {steps} steps. The station replays the actions itself to count
solved levels. **Score = mean solve rate x 100** over the trials (higher is better); the
details give each trial's rate and a random policy's.
The bar to clear: a uniformly random policy solves {random:.1f}% of these held-out levels.
Every trial counts: one that diverges (NaN), crashes or runs out of time before the station
took its parameters counts as 0 solved. What a run prints or returns about itself (env steps,
seconds, training solve rate) is shown as its own report. A submission that defines `test()`
runs it instead (no score).
"""
