"""One neural-activity forecasting trial: 4 frames in, 32 frames out, over every neuron.

Phase "check" builds the network, checks its output shape, makes the optimizer and takes one
training step (quick, on the CPU: a crash here is the code's fault and may be debugged).
Phase "train" trains with the trial's seed: shuffled training windows each epoch, the
validation MAE after each epoch, early stopping, and the time budget; the best epoch's
parameters predict the windows the station scores (the station computes the score itself
from those predictions). Only train and val are in the data folder.
"""

from __future__ import annotations

import os
import time
from typing import Any

from .hooks import (
    Clock,
    ContractError,
    device_names,
    hyperparameters,
    load_hooks,
    plain,
    report_progress,
    require_finite,
    run_phase,
    seal,
)
from .model import Model, count_parameters
from .windows import CONTEXT, HORIZON, HORIZONS_REPORTED, gather, mae_by_horizon, window_starts

DEFAULT_BATCH = 32  # the reference code's default (its spec says 8); a task's `batch_size` replaces it


def default_loss(predictions, targets, params, x):
    import jax.numpy as jnp

    return jnp.mean(jnp.abs(predictions - targets))


def main(ns: dict[str, Any]) -> dict[str, Any]:
    return run_phase(ns, run)


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
    x0, y0 = data.batch("train", data.train_starts[:2])
    variables = model.init(key, x0)
    out, _ = model.apply(variables, x0, training=False)
    if getattr(out, "shape", None) != y0.shape:
        raise ContractError(
            f"the network must map (batch, {CONTEXT}, {data.n_neurons}) to "
            f"(batch, {HORIZON}, {data.n_neurons}); it returned {getattr(out, 'shape', type(out))}"
        )
    learning_rate = float(hparams.get("learning_rate", 1e-3))
    optimizer = hooks.create_optimizer(learning_rate)
    trainer = Trainer(model, optimizer, hooks.extra["compute_loss"])
    trained, rest = model.split(variables)
    opt_state = optimizer.init(trained)
    report = {
        "trial": int(cfg["trial"]),
        "seed": seed,
        "hparams": plain(hparams),
        "batch_size": hooks.batch_size,
        "n_parameters": count_parameters(trained),
        "device": device_names(),
    }
    if cfg["phase"] == "check":
        trained, rest, opt_state, loss = trainer.step(trained, rest, opt_state, x0, y0, key)
        require_finite(float(loss), "the loss of one training step")
        if hooks.complete:
            hooks.complete(model.join(trained, rest), opt_state, {"phase": "check", **report})
        return {"checked": True, **report}
    return {**report, **train(cfg, hooks, data, model, trainer, trained, rest, opt_state, key)}


class Data:
    """The train and val arrays, memory-mapped, and their windows."""

    def __init__(self, folder: str) -> None:
        import numpy as np

        def load(name: str):
            path = os.path.join(folder, name)
            if not os.path.exists(path):
                raise ContractError(f"the task data is missing {name}")  # a station fault, shown plainly
            return np.load(path, mmap_mode="r")

        self.arrays = {split: load(f"{split}_data.npy") for split in ("train", "val")}
        labels = {split: load(f"{split}_condition_labels.npy") for split in ("train", "val")}
        self.train_starts, self.val_starts = window_starts(labels["train"]), window_starts(labels["val"])
        self.n_neurons = int(self.arrays["train"].shape[1])

    def batch(self, split: str, starts):
        import jax.numpy as jnp

        x, y = gather(self.arrays[split], starts)
        return jnp.asarray(x), jnp.asarray(y)


class Trainer:
    """The jitted training step and prediction, built once per trial."""

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

        def predict(trained, rest, x):
            return model.apply(model.join(trained, rest), x, training=False)[0]

        self.step, self.predict = jax.jit(step), jax.jit(predict)


def train(cfg, hooks, data: Data, model: Model, trainer: Trainer, trained, rest, opt_state, key) -> dict[str, Any]:
    """The training loop of one trial. Kept whole: epochs, early stopping, the time budget and
    progress reports share its state, as in the training loops agents read and change."""
    import jax
    import numpy as np

    clock = Clock(float(cfg["budget_s"]))
    rng = np.random.default_rng([hooks.base_seed + int(cfg["trial"]), 2])  # stream 2: window order
    batch = min(hooks.batch_size, len(data.train_starts))
    steps_per_epoch = len(data.train_starts) // batch  # the last partial batch is dropped, never padded
    best = {"mae": float("inf"), "epoch": -1, "horizons": None, "trained": trained, "rest": rest}
    curve, train_curve, stop, epoch, steps = [], [], "max-epochs", 0, 0
    began = time.monotonic()
    for epoch in range(1, int(cfg["max_epochs"]) + 1):
        order = rng.permutation(data.train_starts)
        losses = []
        for i in range(steps_per_epoch):
            key, sub = jax.random.split(key)
            x, y = data.batch("train", order[i * batch : (i + 1) * batch])
            trained, rest, opt_state, loss = trainer.step(trained, rest, opt_state, x, y, sub)
            losses.append(loss)
            steps += 1
            if i % 50 == 49:
                require_finite(float(loss), f"the training loss (epoch {epoch}, step {i + 1})")
            if clock.spent():
                break
        mean_loss = require_finite(
            float(np.mean([float(v) for v in losses])) if losses else 0.0, f"the training loss (epoch {epoch})"
        )
        by_horizon = evaluate(trainer, data, trained, rest, data.val_starts, None, int(cfg.get("eval_batch", 64)))
        mae = require_finite(float(by_horizon.mean()), f"the validation MAE (epoch {epoch})")
        curve.append(round(mae, 6))
        train_curve.append(round(mean_loss, 6))
        print(f"epoch {epoch}: train loss {mean_loss:.5f}, val MAE {mae:.5f} ({clock.elapsed():.0f} s)", flush=True)
        report_progress(f"epoch {epoch}/{int(cfg['max_epochs'])}")
        if mae < best["mae"]:
            best.update(mae=mae, epoch=epoch, horizons=by_horizon, trained=trained, rest=rest)
        if clock.spent():
            stop = "time-budget"
            break
        if epoch - best["epoch"] >= int(cfg["patience"]):
            stop = "early-stopping"
            break
    seconds = time.monotonic() - began
    scored = evaluate(
        trainer,
        data,
        best["trained"],
        best["rest"],
        np.asarray(cfg["score_starts"], dtype=np.int64) if cfg.get("score_starts") is not None else data.val_starts,
        cfg.get("score_neurons"),
        int(cfg.get("eval_batch", 64)),
        keep=True,
    )
    if hooks.complete:
        hooks.complete(model.join(best["trained"], best["rest"]), opt_state, {"best_epoch": best["epoch"]})
    return {
        "epochs": epoch,
        "steps": steps,
        "stop": stop,
        "seconds": round(seconds, 2),
        "steps_per_second": round(steps / max(seconds, 1e-9), 2),
        "best_epoch": best["epoch"],
        "val_mae": best["mae"],
        "val_mae_by_horizon": {str(h): float(best["horizons"][h - 1]) for h in HORIZONS_REPORTED},
        "curve": curve,
        "train_curve": train_curve,
        "val_pred": scored,
    }


def evaluate(trainer: Trainer, data: Data, trained, rest, starts, neurons, eval_batch: int, keep: bool = False):
    """The MAE per horizon over `starts`; with `keep`, the predictions themselves (float32) instead."""
    import numpy as np

    total, count, kept = np.zeros(HORIZON), 0, []
    for i in range(0, len(starts), eval_batch):
        x, y = data.batch("val", starts[i : i + eval_batch])
        pred = np.asarray(trainer.predict(trained, rest, x), dtype=np.float32)
        if keep:
            kept.append(pred if neurons is None else pred[:, :, np.asarray(neurons)])
        else:
            total += mae_by_horizon(pred, np.asarray(y)) * len(pred)
            count += len(pred)
    if keep:
        return np.concatenate(kept) if kept else np.zeros((0, HORIZON, 0), np.float32)
    return total / max(count, 1)


seal(globals())
