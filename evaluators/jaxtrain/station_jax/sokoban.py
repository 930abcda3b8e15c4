"""One Sokoban RL trial: model-free training on the training levels, then the policy handed over.

The run sees the training levels only. The harness owns the rollouts (`n_envs` environments
stepped `unroll` steps per update, auto-reset onto random training levels) and the budget
(environment steps or training time, whichever ends first). Agents supply the network and may
replace the update itself:

    training_step(network, optimizer, params, opt_state, batch, hparams) -> (params, opt_state)

(six arguments). `batch` holds, batch-major (B environments x T steps): observations
(B,T,H,W,8), actions, rewards, dones (the episode ended after that step), starts (the
observation began an episode: the `done` flag the network was given), values, log_probs,
final_values (B,), initial_rnn_states and rnn_states.

Both phases export the policy for ONE environment (`export_policy`, StableHLO through
exchange.export_one, the parameters as arguments); phase "train" publishes it before training
and hands the final parameters to the station once (exchange.py). The station plays the held-out
levels itself with that export, in a sandbox that runs none of the submission's code
(sokoban_scoring.py), and counts solves by replaying the actions. What this run returns is its
own report, shown as such.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

from . import hooks as common
from . import sokoban_env as env
from .exchange import Exchange, export_one
from .hooks import (
    Clock,
    ContractError,
    device_names,
    hyperparameters,
    load_hooks,
    plain,
    report_progress,
    require_finite,
    run_trial,
)
from .model import compiled, count_parameters

DEFAULTS = {"learning_rate": 4e-4, "entropy_coef": 0.01, "value_coef": 0.5, "gamma": 0.97, "gae_lambda": 0.97}


def default_optimizer(learning_rate: float):
    import optax

    return optax.adam(learning_rate, eps=1e-5)


def main(ns: dict[str, Any]) -> dict[str, Any]:
    return run_trial(ns, run)


def call_network(network, params, obs, starts, rnn_state):
    """(logits, value, new rnn state or None): two outputs are accepted for stateless networks."""
    out = network.apply(params, obs, starts, rnn_state)
    if not isinstance(out, tuple) or len(out) not in (2, 3):
        raise ContractError(
            "apply(params, obs, done, rnn_state) must return (logits, value) or "
            f"(logits, value, rnn_state), got {type(out).__name__}"
        )
    return (out[0], out[1], out[2] if len(out) == 3 else None)


def first_observations(levels, max_steps: int):
    """The observations of a batch of levels, reset."""
    import jax

    states = jax.vmap(env.reset)(levels)
    return jax.vmap(lambda s: env.observe(s, max_steps))(states)


def gae(rewards, values, dones, final_values, gamma, lam):
    """Generalised advantage estimates and returns, batch-major (B, T)."""
    import jax
    import jax.numpy as jnp

    def back(carry, t):
        advantage, next_value = carry
        alive = 1.0 - dones[:, t]
        delta = rewards[:, t] + gamma * next_value * alive - values[:, t]
        advantage = delta + gamma * lam * alive * advantage
        return (advantage, values[:, t]), advantage

    steps = rewards.shape[1]
    _, advantages = jax.lax.scan(back, (jnp.zeros_like(final_values), final_values), jnp.arange(steps)[::-1])
    advantages = jnp.swapaxes(advantages[::-1], 0, 1)
    return advantages, advantages + values


def default_training_step(network, optimizer, params, opt_state, batch, hparams):
    """A2C: policy gradient on GAE advantages + value regression − entropy bonus."""
    import jax
    import jax.numpy as jnp
    import optax

    hp = {**DEFAULTS, **hparams}
    advantages, returns = gae(
        batch["rewards"],
        batch["values"],
        batch["dones"].astype(jnp.float32),
        batch["final_values"],
        hp["gamma"],
        hp["gae_lambda"],
    )
    advantages = jax.lax.stop_gradient(advantages)

    def replay(params):
        obs, starts = batch["observations"], batch["starts"]
        if batch["initial_rnn_states"] is None:  # stateless: one call over every step at once
            n, t = obs.shape[:2]
            logits, values, _ = call_network(
                network, params, obs.reshape((n * t,) + obs.shape[2:]), starts.reshape(n * t), None
            )
            return logits.reshape(n, t, -1), values.reshape(n, t)

        def one(state, k):  # recurrent: re-run the unroll from the stored initial state
            logits, values, state = call_network(network, params, obs[:, k], starts[:, k], state)
            return state, (logits, values)

        _, (logits, values) = jax.lax.scan(one, batch["initial_rnn_states"], jnp.arange(obs.shape[1]))
        return jnp.swapaxes(logits, 0, 1), jnp.swapaxes(values, 0, 1)

    def loss_fn(params):
        logits, values = replay(params)
        log_probs = jax.nn.log_softmax(logits)
        taken = jnp.take_along_axis(log_probs, batch["actions"][..., None].astype(jnp.int32), axis=-1)[..., 0]
        entropy = -jnp.mean(jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1))
        policy = -jnp.mean(taken * advantages)
        value = jnp.mean((returns - values) ** 2)
        return policy + 0.5 * hp["value_coef"] * value - hp["entropy_coef"] * entropy

    grads = jax.grad(loss_fn)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


class Levels:
    """The training levels: the only levels a run has."""

    def __init__(self, folder: str) -> None:
        import numpy as np

        path = os.path.join(folder, "train_levels.npy")
        if not os.path.exists(path):
            raise ContractError("the task data is missing train_levels.npy")  # a station fault, shown plainly
        self.train = np.load(path)
        self.shape = tuple(int(v) for v in self.train.shape[1:])


def run(ns: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    hooks = load_hooks(
        ns,
        default_batch=int(cfg.get("n_envs", 64)),
        overridable={"training_step": default_training_step},
        forbidden={"train": "the training loop belongs to the harness; override training_step"},
    )
    if hooks.create_optimizer is common.default_optimizer:  # not overridden: this task's default
        hooks.create_optimizer = default_optimizer
    seed = hooks.base_seed + int(cfg["trial"])
    hparams = {**DEFAULTS, **hyperparameters(hooks, seed)}
    levels = Levels(cfg["data"])
    max_steps, n_envs, unroll = int(cfg["max_steps"]), int(cfg.get("n_envs", 64)), int(cfg.get("unroll", 20))
    network = hooks.create_network(hparams)
    key = jax.random.PRNGKey(seed)
    key, init_key = jax.random.split(key)
    # the training's keys, drawn in both phases: the check's draw is compiled into the evaluation's
    # cache, which the trials load. The third stream was the in-run evaluation's: same draws as before
    _, start_key, _ = jax.random.split(key, 3)
    obs = compiled(lambda lv: first_observations(lv, max_steps), jnp.asarray(levels.train[:2]))
    starts = jnp.ones(obs.shape[0], bool)
    params = compiled(network.init, init_key, obs, starts)
    logits, value, rnn = compiled(lambda p, o, s: call_network(network, p, o, s, None), params, obs, starts)
    if getattr(logits, "shape", None) != (obs.shape[0], 4) or getattr(value, "shape", None) != (obs.shape[0],):
        raise ContractError(
            f"apply must return logits of shape (batch, 4) and value of shape (batch,); got "
            f"{getattr(logits, 'shape', None)} and {getattr(value, 'shape', None)}"
        )
    memory = int(cfg["memory_size"])  # the task's memory_size: the station's scorer expects exactly this
    exported = export_policy(network, params, tuple(obs.shape[1:]), rnn, obs.shape[0], memory)
    optimizer = hooks.create_optimizer(float(hparams["learning_rate"]))
    opt_state = compiled(optimizer.init, params)
    report = {
        "trial": int(cfg["trial"]),
        "seed": seed,
        "hparams": plain(hparams),
        "n_parameters": count_parameters(params),
        "device": device_names(),
        "recurrent": rnn is not None,
    }
    learner = Learner(network, optimizer, hooks.extra["training_step"], hparams, levels, max_steps, n_envs, unroll)
    if cfg["phase"] == "check":
        if not cfg.get("as_trials"):  # the trials run elsewhere (a GPU): a small update is check enough
            learner.n_envs, learner.unroll = 2, 2
        carry = learner.start(jax.random.PRNGKey(seed), params)
        params, opt_state, carry, stats = learner.update(params, opt_state, carry)
        require_finite(float(stats["reward"]), "the reward of one update")
        if hooks.complete:
            hooks.complete(params, opt_state, {"phase": "check", **report})
        return {"checked": True, **report}
    exchange = Exchange(cfg["exchange"])
    exchange.publish(exported)
    return {**report, **train(cfg, hooks, learner, params, opt_state, start_key, exchange)}


def export_policy(network, params, obs_shape: tuple[int, ...], rnn, batch: int, memory: int) -> bytes:
    """The policy for one environment, as the station calls it (sokoban_scoring.py):
    (parameter leaves..., obs (H, W, 8) float32, done () bool, memory (memory,) float32) ->
    (logits (4,) float32, memory (memory,) float32). A recurrent network's state travels packed
    into `memory` (float32, zero-padded); with `done` True (the first observation of a level) the
    state starts as the network makes it from rnn_state=None, as in training. `rnn` is the state
    the network returned for `batch` environments (None: stateless)."""
    import jax
    import jax.numpy as jnp

    leaves, tree = jax.tree_util.tree_flatten(params)
    state_leaves, state_tree = jax.tree_util.tree_flatten(rnn)
    if any(getattr(leaf, "ndim", 0) < 1 or leaf.shape[0] != batch for leaf in state_leaves):
        raise ContractError(f"every array of the recurrent state must have the batch ({batch}) as its first axis")
    shapes = [(tuple(leaf.shape[1:]), leaf.dtype) for leaf in state_leaves]
    sizes = [math.prod(shape) for shape, _ in shapes]
    if sum(sizes) > memory:
        raise ContractError(
            f"the recurrent state holds {sum(sizes):,} numbers per environment; this task carries at most "
            f"{memory:,} (its memory_size)"
        )

    def pack(state):
        found = jax.tree_util.tree_leaves(state)
        if jax.tree_util.tree_structure(state) != state_tree or [(x.shape[1:], x.dtype) for x in found] != shapes:
            raise ContractError("apply must return the recurrent state in the shape and dtype it was given")
        flat = [x.reshape(-1).astype(jnp.float32) for x in found]
        return jnp.concatenate([*flat, jnp.zeros(memory - sum(sizes), jnp.float32)])

    def unpack(vector):
        parts, at = [], 0
        for (shape, dtype), size in zip(shapes, sizes):
            parts.append(vector[at : at + size].reshape((1, *shape)).astype(dtype))
            at += size
        return jax.tree_util.tree_unflatten(state_tree, parts)

    def policy_one(*args):
        params_one = jax.tree_util.tree_unflatten(tree, args[:-3])
        obs, done, carried = args[-3:]
        obs, starts = obs[None], done[None]
        if not state_leaves:  # stateless: the memory passes through untouched
            return call_network(network, params_one, obs, starts, None)[0][0].astype(jnp.float32), carried
        state = jax.lax.cond(
            done, lambda: call_network(network, params_one, obs, starts, None)[2], lambda: unpack(carried)
        )
        logits, _, state = call_network(network, params_one, obs, starts, state)
        return logits[0].astype(jnp.float32), pack(state)

    return export_one(policy_one, leaves, [(obs_shape, "float32"), ((), "bool"), ((memory,), "float32")])


class Learner:
    """The jitted update: a rollout on the training levels, then training_step."""

    def __init__(
        self, network, optimizer, training_step, hparams, levels: Levels, max_steps: int, n_envs: int, unroll: int
    ) -> None:
        self.network, self.optimizer, self.training_step, self.hparams = network, optimizer, training_step, hparams
        self.levels, self.max_steps, self.n_envs, self.unroll = levels, max_steps, n_envs, unroll
        self._update: Callable[..., Any] | None = None

    def start(self, key, params):
        return compiled(self._start, key, params)

    def _start(self, key, params):
        import jax
        import jax.numpy as jnp

        key, pick = jax.random.split(key)
        train = jnp.asarray(self.levels.train)
        states = jax.vmap(env.reset)(train[jax.random.randint(pick, (self.n_envs,), 0, len(train))])
        obs = jax.vmap(lambda s: env.observe(s, self.max_steps))(states)
        starts = jnp.ones(self.n_envs, bool)
        _, _, rnn = call_network(self.network, params, obs, starts, None)
        return {"states": states, "obs": obs, "starts": starts, "rnn": rnn, "key": key}

    def update(self, params, opt_state, carry):
        import jax

        if self._update is None:
            self._update = jax.jit(self._make_update())
        return self._update(params, opt_state, carry)

    def _make_update(self):
        import jax
        import jax.numpy as jnp

        train, max_steps = jnp.asarray(self.levels.train), self.max_steps

        def act(carry, _):
            params = carry["params"]
            key, sample, pick = jax.random.split(carry["key"], 3)
            logits, value, rnn = call_network(self.network, params, carry["obs"], carry["starts"], carry["rnn"])
            action = jax.random.categorical(sample, logits)
            log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], axis=-1)[:, 0]
            nxt = train[jax.random.randint(pick, (action.shape[0],), 0, len(train))]
            states, obs, reward, done = jax.vmap(lambda s, a, l: env.step_autoreset(s, a, max_steps, l))(
                carry["states"], action, nxt
            )
            record = {
                "observations": carry["obs"],
                "starts": carry["starts"],
                "actions": action,
                "rewards": reward,
                "dones": done,
                "values": value,
                "log_probs": log_prob,
                "rnn_states": carry["rnn"],
                "solved": done & (reward > 5.0),
            }
            new = {**carry, "states": states, "obs": obs, "starts": done, "rnn": rnn, "key": key}
            return new, record

        def update(params, opt_state, carry):
            initial_rnn = carry["rnn"]
            carry, steps = jax.lax.scan(act, {**carry, "params": params}, None, length=self.unroll)
            carry.pop("params")
            batch = jax.tree_util.tree_map(lambda a: jnp.swapaxes(a, 0, 1), steps)  # batch-major
            _, final_values, _ = call_network(self.network, params, carry["obs"], carry["starts"], carry["rnn"])
            batch["final_values"], batch["initial_rnn_states"] = final_values, initial_rnn
            stats = {
                "reward": jnp.mean(batch["rewards"]),
                "episodes": jnp.sum(batch["dones"]),
                "solved": jnp.sum(batch.pop("solved")),
            }
            params, opt_state = self.training_step(self.network, self.optimizer, params, opt_state, batch, self.hparams)
            return params, opt_state, carry, stats

        return update


def train(cfg, hooks, learner: Learner, params, opt_state, start_key, exchange: Exchange) -> dict[str, Any]:
    """The training loop of one trial, then the final parameters handed to the station once."""
    import jax

    clock = Clock(float(cfg["budget_s"]))
    carry = learner.start(start_key, params)
    per_update = learner.n_envs * learner.unroll
    limit = int(cfg["env_steps"]) // per_update
    updates, curve, window = 0, [], {"episodes": 0, "solved": 0}
    began, stop = time.monotonic(), "step-budget"
    while updates < limit:
        params, opt_state, carry, stats = learner.update(params, opt_state, carry)
        updates += 1
        if updates % 50 == 0 or updates == limit:
            stats = jax.device_get(stats)
            require_finite(float(stats["reward"]), f"the mean reward (update {updates})")
            report_progress(f"update {updates}/{limit}")
            window["episodes"] += int(stats["episodes"])
            window["solved"] += int(stats["solved"])
            if updates % 100 == 0:
                rate = window["solved"] / max(window["episodes"], 1)
                curve.append([updates * per_update, round(rate, 4)])
                if updates % 500 == 0:
                    print(
                        f"update {updates}: {updates * per_update:,} env steps, training solve rate "
                        f"{rate:.3f} ({clock.elapsed():.0f} s)",
                        flush=True,
                    )
                window = {"episodes": 0, "solved": 0}
        if updates < limit:
            # after every update, once it has run (not merely been queued): the station's clock
            # takes the final parameters only shortly after the budget
            jax.block_until_ready(stats)
            if exchange.stopped():
                stop = "station"
                break
            if clock.spent():
                stop = "time-budget"
                break
    seconds = time.monotonic() - began
    leaves = host_arrays(params)
    if not all_finite(leaves):
        raise ContractError("the parameters became NaN or infinite: training diverged")
    if not exchange.offer(leaves):
        stop = "station"  # the station stopped the trial before it took these parameters
    if hooks.complete:
        hooks.complete(params, opt_state, {"updates": updates})
    return {
        "updates": updates,
        "env_steps": updates * per_update,
        "stop": stop,
        "seconds": round(seconds, 2),
        "steps_per_second": round(updates * per_update / max(seconds, 1e-9), 1),
        "train_curve": curve,  # [env steps, share of training episodes solved], every 100 updates
        "handover_s": round(exchange.waited_s, 2),  # after `seconds`: handing the parameters to the station
    }


def host_arrays(params) -> list[Any]:
    """The parameter leaves as numpy arrays, copied to the host once: checked, then handed over."""
    import jax
    import numpy as np

    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(params)]


def all_finite(leaves: list[Any]) -> bool:
    """Whether every number of `leaves` is finite, checked on the host: nothing to compile (a
    compiled check was the only computation a trial could not load from the check's cache)."""
    import numpy as np

    return all(bool(np.isfinite(leaf).all()) for leaf in leaves if np.issubdtype(leaf.dtype, np.number))
