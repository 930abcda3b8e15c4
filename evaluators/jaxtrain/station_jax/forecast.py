"""One neural-activity forecasting trial: 4 frames in, 32 frames out, over every neuron.

The run sees the training split only. Phase "check" builds the network, checks its output
shape, makes the optimizer, takes one training step (on the trials' batch when they run on the
CPU too: they load its compilation) and exports the apply function (quick, on the CPU: a crash
here is the code's fault and may be debugged). Phase "train" trains with the
trial's seed (shuffled training windows each epoch, the time budget) and hands the station a
checkpoint after each epoch (exchange.py); the station scores the checkpoints on the validation
windows in a sandbox of its own, stops the run early when the validation MAE stops improving,
and keeps the best epoch. What this run returns is its own report, shown as such.
"""

from __future__ import annotations

import os
import time
from typing import Any

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
from .model import Model, compiled, count_parameters, shape_of
from .windows import CONTEXT, HORIZON, gather, window_starts

DEFAULT_BATCH = 32  # the reference code's default (its spec says 8); a task's `batch_size` replaces it


def default_loss(predictions, targets, params, x):
    import jax.numpy as jnp

    return jnp.mean(jnp.abs(predictions - targets))


def main(ns: dict[str, Any]) -> dict[str, Any]:
    return run_trial(ns, run)


def run(ns: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    import jax

    hooks = load_hooks(
        ns,
        default_batch=int(cfg.get("default_batch", DEFAULT_BATCH)),
        overridable={"compute_loss": default_loss},
        forbidden={
            "train": "the training loop belongs to the harness; define hooks only",
            "training_loop": "the training loop belongs to the harness; define hooks only",
        },
    )
    seed = hooks.base_seed + int(cfg["trial"])
    hparams = hyperparameters(hooks, seed)
    data = Data(cfg["data"])
    model = Model(hooks.create_network(hparams))
    key = jax.random.PRNGKey(seed)
    x0, y0 = data.batch(data.train_starts[:2])
    variables = model.init(key, x0, jit=True)
    out = shape_of(lambda v, inputs: model.apply(v, inputs, training=False)[0], variables, x0)
    if getattr(out, "shape", None) != y0.shape:
        raise ContractError(
            f"the network must map (batch, {CONTEXT}, {data.n_neurons}) to "
            f"(batch, {HORIZON}, {data.n_neurons}); it returned {getattr(out, 'shape', type(out))}"
        )
    learning_rate = float(hparams.get("learning_rate", 1e-3))
    optimizer = hooks.create_optimizer(learning_rate)
    trainer = Trainer(model, optimizer, hooks.extra["compute_loss"])
    trained, rest = model.split(variables)
    opt_state = compiled(optimizer.init, trained)
    exported = export_apply(model, variables, data.n_neurons)
    report = {
        "trial": int(cfg["trial"]),
        "seed": seed,
        "hparams": plain(hparams),
        "batch_size": hooks.batch_size,
        "n_parameters": count_parameters(trained),
        "device": device_names(),
    }
    if cfg["phase"] == "check":
        if cfg.get("as_trials"):  # the step the trials take (whose compilation they then load)
            x0, y0 = data.batch(data.train_starts[: batch_size(hooks, data)])
        trained, rest, opt_state, loss = trainer.step(trained, rest, opt_state, x0, y0, key)
        require_finite(float(loss), "the loss of one training step")
        if hooks.complete:
            hooks.complete(model.join(trained, rest), opt_state, {"phase": "check", **report})
        return {"checked": True, **report}
    exchange = Exchange(cfg["exchange"])
    exchange.publish(exported)
    return {**report, **train(cfg, hooks, data, model, trainer, trained, rest, opt_state, key, exchange)}


def batch_size(hooks, data: Data) -> int:
    """The rows of a training step, in the trials and in a check that compiles their step."""
    return min(hooks.batch_size, len(data.train_starts))


def export_apply(model: Model, variables: Any, n_neurons: int) -> bytes:
    """The network for one window: (all variables' leaves..., x (4, neurons)) -> ((32, neurons),)."""
    import jax
    import jax.numpy as jnp

    leaves, tree = jax.tree_util.tree_flatten(variables)

    def apply_one(*args):
        out, _ = model.apply(jax.tree_util.tree_unflatten(tree, args[:-1]), args[-1][None], training=False)
        return (jnp.asarray(out[0], jnp.float32),)

    return export_one(apply_one, leaves, [((CONTEXT, n_neurons), "float32")])


class Data:
    """The training arrays, memory-mapped, and their windows: the run has no other split."""

    def __init__(self, folder: str) -> None:
        import numpy as np

        def load(name: str):
            path = os.path.join(folder, name)
            if not os.path.exists(path):
                raise ContractError(f"the task data is missing {name}")  # a station fault, shown plainly
            return np.load(path, mmap_mode="r")

        self.array = load("train_data.npy")
        self.train_starts = window_starts(load("train_condition_labels.npy"))
        self.n_neurons = int(self.array.shape[1])

    def batch(self, starts):
        import jax.numpy as jnp

        x, y = gather(self.array, starts)
        return jnp.asarray(x), jnp.asarray(y)


class Trainer:
    """The jitted training step, built once per trial."""

    def __init__(self, model: Model, optimizer, loss_fn) -> None:
        import jax
        import optax

        def loss_of(trained, rest, x, y, rng):
            variables = model.join(trained, rest)
            pred, updates = model.apply(variables, x, training=True, rng=rng)
            loss = loss_fn(pred, y, variables, x)
            return loss, ({**rest, **updates} if updates else rest)

        def step(trained, rest, opt_state, x, y, rng):
            (loss, rest), grads = jax.value_and_grad(loss_of, has_aux=True)(trained, rest, x, y, rng)
            updates, opt_state = optimizer.update(grads, opt_state, trained)
            return optax.apply_updates(trained, updates), rest, opt_state, loss

        self.step = jax.jit(step)


def train(cfg, hooks, data: Data, model: Model, trainer: Trainer, trained, rest, opt_state, key, exchange: Exchange):
    """The training loop of one trial. Kept whole: epochs, the time budget, the hand-over of
    checkpoints and progress reports share its state, as in the training loops agents read."""
    import jax
    import numpy as np

    clock = Clock(float(cfg["budget_s"]))
    rng = np.random.default_rng([hooks.base_seed + int(cfg["trial"]), 2])  # stream 2: window order
    batch = batch_size(hooks, data)
    steps_per_epoch = len(data.train_starts) // batch  # the last partial batch is dropped, never padded
    train_curve, stop, epoch, steps = [], "max-epochs", 0, 0
    began = time.monotonic()
    for epoch in range(1, int(cfg["max_epochs"]) + 1):
        order = rng.permutation(data.train_starts)
        losses = []
        for i in range(steps_per_epoch):
            key, sub = jax.random.split(key)
            x, y = data.batch(order[i * batch : (i + 1) * batch])
            trained, rest, opt_state, loss = trainer.step(trained, rest, opt_state, x, y, sub)
            losses.append(loss)
            steps += 1
            if i % 50 == 49:
                require_finite(float(loss), f"the training loss (epoch {epoch}, step {i + 1})")
            if clock.spent() or exchange.stopped():
                break
        mean_loss = require_finite(
            float(np.mean([float(v) for v in losses])) if losses else 0.0, f"the training loss (epoch {epoch})"
        )
        train_curve.append(round(mean_loss, 6))
        print(f"epoch {epoch}: train loss {mean_loss:.5f} ({clock.elapsed():.0f} s)", flush=True)
        report_progress(f"epoch {epoch}/{int(cfg['max_epochs'])}")
        if not exchange.offer(jax.tree_util.tree_leaves(model.join(trained, rest))):
            stop = "station"
            break
        if clock.spent():
            stop = "time-budget"
            break
    seconds = time.monotonic() - began
    if hooks.complete:
        hooks.complete(model.join(trained, rest), opt_state, {"epochs": epoch})
    return {
        "epochs": epoch,
        "steps": steps,
        "stop": stop,
        "seconds": round(seconds, 2),
        "steps_per_second": round(steps / max(seconds, 1e-9), 2),
        "train_curve": train_curve,
        "handover_s": round(exchange.waited_s, 2),  # of `seconds`: writing checkpoints, waiting for the station
    }
