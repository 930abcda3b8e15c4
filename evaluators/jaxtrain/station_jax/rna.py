"""One RNA modelling trial: one network trained on one of the 7 sequence-level datasets.

The run sees the training split only. Phase "check" builds the network for every dataset,
checks its output shape on a batch of that dataset, takes one training step on each and
exports the apply function (on the CPU: a crash here is the code's fault and may be debugged).
Phase "train" trains trial n on dataset n (shuffled batches each epoch, the time budget) and
hands the station a checkpoint after each epoch (exchange.py); the station scores the
checkpoints on the validation sequences in a sandbox of its own, one sequence per call of the
exported network, stops the run early when the dataset's metric stops improving and keeps the
best epoch. What this run returns is its own report, shown as such.

The loss is fixed by the dataset's task type and cannot be overridden. The last partial batch
of an epoch is padded to the batch size with rows of weight zero, so padding never enters the
loss and the jitted step keeps one shape. Seeds: BASE_SEED + a stable hash of the dataset name
(+ k in the k-th run of the external evaluation).

Shared with the station (which imports this module on the host): the one-hot encoding, the
reader of the station's CSV files and the output shapes. numpy only at import time (jax and
optax inside functions).
"""

from __future__ import annotations

import csv
import math
import os
import time
import zlib
from typing import Any

import numpy as np

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

DEFAULT_BATCH = 64
DEFAULT_HPARAMS = {"learning_rate": 1e-3, "hidden_dim": 512, "dropout": 0.1}
CHECK_ROWS = 4  # the check's batch before trials on a GPU: enough to see the batch axis

# -- one-hot encoding: channels A, T/U, C, G; IUPAC codes share their weight; N, X and padding are zeros
CHANNELS = "ATCG"
IUPAC = {
    "A": "A", "C": "C", "G": "G", "T": "T", "U": "T",
    "R": "AG", "Y": "CT", "S": "CG", "W": "AT", "K": "GT", "M": "AC",
    "B": "CGT", "D": "AGT", "H": "ACT", "V": "ACG",
    "N": "", "X": "",
}  # fmt: skip
ALPHABET = frozenset(IUPAC)


def _code_table() -> np.ndarray:
    """Row b: the one-hot weights of the (ASCII) letter with byte value b; row 0 is padding."""
    table = np.zeros((256, 4), dtype=np.float32)
    for letter, bases in IUPAC.items():
        for base in bases:
            table[ord(letter), CHANNELS.index(base)] = 1.0 / len(bases)
    return table


CODE_TABLE = _code_table()


def encode(sequences: list[str], length: int) -> np.ndarray:
    """(N, length) uint8 letter codes, zero-padded on the right (sequences must fit in `length`)."""
    codes = np.zeros((len(sequences), length), dtype=np.uint8)
    for row, sequence in enumerate(sequences):
        codes[row, : len(sequence)] = np.frombuffer(sequence.encode("ascii"), dtype=np.uint8)
    return codes


def one_hot(codes: np.ndarray) -> np.ndarray:
    """(..., L) letter codes -> (..., L, 4) float32 weights over A, T/U, C, G."""
    return CODE_TABLE[codes]


# -- the station's CSV files: a header, then `sequence,label...` per row ---------------------------------
def read_split(path: str, task_type: str, limit: int | None = None) -> tuple[list[str], np.ndarray]:
    """(sequences, labels) of one split as the station writes it: labels (N,) float64 for one target,
    (N, k) for several, (N,) int64 class ids for multiclass classification."""
    if not os.path.exists(path):
        raise ContractError(f"the task data is missing {path}")  # a station fault, shown plainly
    sequences: list[str] = []
    labels: list[list[float]] = []
    with open(path, newline="", encoding="ascii") as handle:
        rows = csv.reader(handle)
        next(rows)  # header
        for row in rows:
            if limit is not None and len(sequences) >= limit:
                break
            sequences.append(row[0])
            labels.append([float(value) for value in row[1:]])
    array = np.asarray(labels, dtype=np.float64).reshape(len(labels), -1)
    if task_type == "multiclass_classification":
        return sequences, array[:, 0].astype(np.int64)
    return sequences, (array[:, 0] if array.shape[1] == 1 else array)


# -- the fixed losses, per example -------------------------------------------------------------------------
def per_example_loss(task_type: str, pred, target):
    import jax.numpy as jnp
    import optax

    if task_type == "regression":
        return (pred.reshape(pred.shape[0]) - target) ** 2
    if task_type == "multilabel_regression":
        return jnp.mean((pred - target) ** 2, axis=1)
    if task_type == "multilabel_classification":
        return jnp.mean(optax.sigmoid_binary_cross_entropy(pred, target), axis=1)
    return optax.softmax_cross_entropy_with_integer_labels(pred, target)


def output_shapes(dataset: dict[str, Any], batch: int) -> tuple[list[tuple[int, ...]], str]:
    """The output shapes a network may give for a batch, and how the task spec says it."""
    if dataset["task_type"] == "regression":
        return [(batch,), (batch, 1)], "(batch,) or (batch, 1)"
    return [(batch, int(dataset["d_output"]))], f"(batch, {int(dataset['d_output'])})"


# -- the network as the spec describes it: init(rng, x), apply(params, x, deterministic, rng_key) ---------
def build(create_network, hparams: dict[str, Any]) -> Model:
    network = create_network(hparams)
    if not callable(getattr(network, "init", None)) or not callable(getattr(network, "apply", None)):
        raise ContractError(
            "create_network(hparams) must return an object with init(rng, x) and "
            f"apply(params, x, deterministic=True, rng_key=None), got {type(network).__name__}"
        )
    return Model(network)


def forward(model: Model, variables, x, *, train: bool, rng=None) -> tuple[Any, Any]:
    """(outputs, updated non-trained collections or None). A Flax module gets `deterministic` and a
    `dropout` RNG; any other network gets apply(params, x, deterministic=..., rng_key=...)."""
    network = model.network
    if not model.flax:
        return network.apply(variables, x, deterministic=not train, rng_key=rng), None
    extra: dict[str, Any] = {"deterministic": not train}
    if train and rng is not None:
        extra["rngs"] = {"dropout": rng}
    if train and model.mutable:
        out, updates = network.apply(variables, x, mutable=model.mutable, **extra)
        return out, dict(updates)
    return network.apply(variables, x, **extra), None


class Trainer:
    """The jitted weighted training step of one dataset, built once per trial."""

    def __init__(self, model: Model, optimizer, task_type: str) -> None:
        import jax
        import jax.numpy as jnp
        import optax

        def loss_of(trained, rest, x, y, weight, rng):
            pred, updates = forward(model, model.join(trained, rest), x, train=True, rng=rng)
            losses = per_example_loss(task_type, pred, y)
            loss = jnp.sum(losses * weight) / jnp.maximum(jnp.sum(weight), 1.0)
            return loss, ({**rest, **updates} if updates else rest)

        def step(trained, rest, opt_state, x, y, weight, rng):
            (loss, rest), grads = jax.value_and_grad(loss_of, has_aux=True)(trained, rest, x, y, weight, rng)
            updates, opt_state = optimizer.update(grads, opt_state, trained)
            return optax.apply_updates(trained, updates), rest, opt_state, loss

        self.step = jax.jit(step)


# -- one trial --------------------------------------------------------------------------------------------------
def default_optimizer(learning_rate: float):
    import optax

    return optax.adamw(learning_rate, weight_decay=0.01)


def dataset_seed(base_seed: int, name: str) -> int:
    """BASE_SEED plus a hash of the dataset's name that is the same in every process (crc32)."""
    return base_seed + zlib.crc32(name.encode("utf-8")) % 1000


def main(ns: dict[str, Any]) -> dict[str, Any]:
    return run_trial(ns, run)


def run(ns: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    hooks = load_hooks(
        ns,
        default_batch=DEFAULT_BATCH,
        overridable={},
        forbidden={
            "compute_loss": "the loss is fixed by each dataset's task type and cannot be overridden",
            "train": "the training loop belongs to the harness; define hooks only",
            "training_loop": "the training loop belongs to the harness; define hooks only",
        },
    )
    if not callable(ns.get("create_optimizer")):
        hooks.create_optimizer = default_optimizer  # this task's default is AdamW, not hooks.py's Adam
    if cfg["phase"] == "check":
        return {"checked": True, "device": device_names(), "datasets": [check(cfg, hooks, d) for d in cfg["datasets"]]}
    return train(cfg, hooks, cfg["datasets"][int(cfg["trial"])])


def trial_hparams(hooks, dataset: dict[str, Any], seed: int) -> dict[str, Any]:
    """The defaults, the agent's draw for this seed, then the dataset's facts (which always win)."""
    facts = {key: dataset[key] for key in ("d_output", "task_type", "max_seq_len", "metric", "level")}
    return {**DEFAULT_HPARAMS, **hyperparameters(hooks, seed), "dataset": dataset["name"], **facts}


def batch_of(codes: np.ndarray, labels: np.ndarray, rows: np.ndarray, size: int):
    """x, y and weights of `rows`, padded to `size` rows of weight 0 (the last partial batch)."""
    import jax.numpy as jnp

    pad = size - len(rows)
    x = one_hot(codes[rows])
    y = labels[rows]
    if pad:
        x = np.concatenate([x, np.zeros((pad, *x.shape[1:]), x.dtype)])
        y = np.concatenate([y, np.zeros((pad, *y.shape[1:]), y.dtype)])
    weight = np.concatenate([np.ones(len(rows), np.float32), np.zeros(pad, np.float32)])
    return jnp.asarray(x), jnp.asarray(y), jnp.asarray(weight)


class EncodedSplit:
    """One split of the dataset as letter codes of the dataset's fixed length, with its labels."""

    def __init__(self, folder: str, dataset: dict[str, Any], split: str, limit: int | None = None) -> None:
        task_type = dataset["task_type"]
        sequences, labels = read_split(os.path.join(folder, dataset["name"], f"{split}.csv"), task_type, limit)
        self.codes = encode(sequences, int(dataset["max_seq_len"]))
        self.labels = labels if task_type == "multiclass_classification" else labels.astype(np.float32)
        self.size = len(sequences)


def check(cfg: dict[str, Any], hooks, dataset: dict[str, Any]) -> dict[str, Any]:
    """Build the network for one dataset, check its output shape, take one training step, export it."""
    import jax

    seed = dataset_seed(hooks.base_seed, dataset["name"])
    hparams = trial_hparams(hooks, dataset, seed)
    # on the trials' batch when they run on this device too: each trial then loads the step compiled here
    rows = hooks.batch_size if cfg.get("as_trials") else CHECK_ROWS
    split = EncodedSplit(cfg["data"], dataset, "train", limit=rows)
    model = build(hooks.create_network, hparams)
    key = jax.random.PRNGKey(seed)
    x, y, weight = batch_of(split.codes, split.labels, np.arange(split.size), split.size)
    variables = model.init(key, x, jit=True)
    out = shape_of(lambda v, inputs: forward(model, v, inputs, train=False)[0], variables, x)
    allowed, wanted = output_shapes(dataset, split.size)
    if getattr(out, "shape", None) not in allowed:
        got = tuple(out.shape) if hasattr(out, "shape") else type(out).__name__
        raise ContractError(
            f"for {dataset['name']} ({dataset['task_type']}, d_output {dataset['d_output']}) the network "
            f"must map x of shape (batch, {dataset['max_seq_len']}, 4) to {wanted}; it returned {got} "
            f"for a batch of {split.size}"
        )
    optimizer = hooks.create_optimizer(float(hparams["learning_rate"]))
    trainer = Trainer(model, optimizer, dataset["task_type"])
    trained, rest = model.split(variables)
    opt_state = compiled(optimizer.init, trained)
    trained, rest, opt_state, loss = trainer.step(trained, rest, opt_state, x, y, weight, key)
    require_finite(float(loss), f"the loss of one training step on {dataset['name']}")
    export_apply(model, model.join(trained, rest), dataset)  # an export that fails is an ordinary crash here
    if hooks.complete:
        hooks.complete(model.join(trained, rest), opt_state, {"phase": "check", "dataset": dataset["name"]})
    return {"dataset": dataset["name"], "n_parameters": count_parameters(trained), "hparams": plain(hparams)}


def export_apply(model: Model, variables: Any, dataset: dict[str, Any]) -> bytes:
    """The network for one sequence: (all variables' leaves..., x (max_seq_len, 4) float32, the
    sequence one-hot and zero-padded as in training) -> ((d_output,) float32,). A regression
    network's (batch,) or (batch, 1) both give (1,)."""
    import jax
    import jax.numpy as jnp

    leaves, tree = jax.tree_util.tree_flatten(variables)
    d_output = int(dataset["d_output"])

    def apply_one(*args):
        out, _ = forward(model, jax.tree_util.tree_unflatten(tree, args[:-1]), args[-1][None], train=False)
        return (jnp.reshape(out[0], (d_output,)).astype(jnp.float32),)

    return export_one(apply_one, leaves, [((int(dataset["max_seq_len"]), 4), "float32")])


def train(cfg: dict[str, Any], hooks, dataset: dict[str, Any]) -> dict[str, Any]:
    """The training loop of one trial. Kept whole: epochs, the time budget, the hand-over of
    checkpoints and progress reports share its state."""
    import jax

    clock = Clock(float(cfg["budget_s"]))
    name, task_type = dataset["name"], dataset["task_type"]
    seed = dataset_seed(hooks.base_seed, name) + int(cfg.get("seed_offset", 0))  # the external evaluation's seeds
    hparams = trial_hparams(hooks, dataset, seed)
    train_split = EncodedSplit(cfg["data"], dataset, "train")
    model = build(hooks.create_network, hparams)
    key = jax.random.PRNGKey(seed)
    batch = min(hooks.batch_size, train_split.size)
    x0, _, _ = batch_of(train_split.codes, train_split.labels, np.arange(batch), batch)
    variables = model.init(key, x0, jit=True)
    optimizer = hooks.create_optimizer(float(hparams["learning_rate"]))
    trainer = Trainer(model, optimizer, task_type)
    trained, rest = model.split(variables)
    opt_state = compiled(optimizer.init, trained)
    exchange = Exchange(cfg["exchange"])
    exchange.publish(export_apply(model, model.join(trained, rest), dataset))
    report: dict[str, Any] = {
        "trial": int(cfg["trial"]),
        "dataset": name,
        "seed": seed,
        "hparams": plain(hparams),
        "batch_size": batch,
        "n_parameters": count_parameters(trained),
        "device": device_names(),
    }
    rng = np.random.default_rng([seed, 2])  # stream 2: the order of the training rows
    steps_per_epoch = math.ceil(train_split.size / batch)
    train_curve, stop, epoch, steps = [], "max-epochs", 0, 0
    began = time.monotonic()
    for epoch in range(1, int(cfg["max_epochs"]) + 1):
        order = rng.permutation(train_split.size)
        losses = []
        for i in range(steps_per_epoch):
            key, sub = jax.random.split(key)
            x, y, weight = batch_of(train_split.codes, train_split.labels, order[i * batch : (i + 1) * batch], batch)
            trained, rest, opt_state, loss = trainer.step(trained, rest, opt_state, x, y, weight, sub)
            losses.append(loss)
            steps += 1
            if clock.spent() or exchange.stopped():
                break
        mean_loss = require_finite(float(np.mean([float(v) for v in losses])), f"the training loss (epoch {epoch})")
        train_curve.append(round(mean_loss, 6))
        print(f"{name} epoch {epoch}: train loss {mean_loss:.5f} ({clock.elapsed():.0f} s)", flush=True)
        report_progress(f"{name} epoch {epoch}/{int(cfg['max_epochs'])}")
        if not exchange.offer(jax.tree_util.tree_leaves(model.join(trained, rest))):
            stop = "station"
            break
        if clock.spent():
            stop = "time-budget"
            break
    seconds = time.monotonic() - began
    if hooks.complete:
        hooks.complete(model.join(trained, rest), opt_state, {"dataset": name, "epochs": epoch})
    return {
        **report,
        "epochs": epoch,
        "steps": steps,
        "stop": stop,
        "seconds": round(seconds, 2),
        "steps_per_second": round(steps / max(seconds, 1e-9), 2),
        "train_curve": train_curve,
        "handover_s": round(exchange.waited_s, 2),  # of `seconds`: writing checkpoints, waiting for the station
    }
