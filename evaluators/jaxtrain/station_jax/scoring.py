"""The scoring sandbox of two-stage scoring: the station's code and an exported computation, no more.

Runs as the whole program of its own sandboxed run (two_stage.py starts it with a two-line
driver), next to one training run, for as long as that trial lasts. It holds the scored inputs
(`scoring_data/`, with their targets where its mode measures the outputs itself) and never runs a
line of the submission's Python: what it runs of the submission is the exported apply function
(StableHLO), checked first (verify.py), and then called for one example at a time.

    inbox/   (read-only, written by the station) settings.json, apply.jaxexport,
             checkpoint-<k>.npz for k = 1, 2, ..., and `done` when the trial is over
    outbox/  (writable) outputs-<k>.npz (output_0, output_1, ...) or refused-<k>.txt

The return value: {"refused": why} when the export is refused (the run ends at once), else
{"scored": how many checkpoints}. A checkpoint whose arrays do not match the export's parameter
arguments gets refused-<k>.txt and the loop goes on.

Modes (settings["mode"]): "map" calls the function on every example of `scoring_data/input_<i>.npy`
(leading axis: examples) through jax.lax.map: a sequential loop with nothing carried from one
example to the next, so an output depends on its own example and the parameters only. A task
with another way of scoring adds its function to MODES: Sokoban steps levels itself
(sokoban_scoring.py), forecasting cuts windows and sums their errors (window_scoring.py).
"""

from __future__ import annotations

import io
import json
import os
import time
import zipfile
from collections.abc import Callable
from typing import Any

from .sokoban_scoring import play_levels
from .verify import Refused, check_exported
from .window_scoring import score_windows

SETTINGS_FILE, APPLY_FILE, DONE_FILE = "settings.json", "apply.jaxexport", "done"
POLL_S = 0.02
DEFAULT_CHUNK = 256  # examples per compiled call: one compile, bounded memory


def checkpoint_name(k: int) -> str:
    return f"checkpoint-{k}.npz"


def outputs_name(k: int) -> str:
    return f"outputs-{k}.npz"


def refused_name(k: int) -> str:
    return f"refused-{k}.txt"


def main(inbox: str = "inbox", outbox: str = "outbox", data: str = "scoring_data") -> dict[str, Any]:
    import numpy as np

    with open(os.path.join(inbox, SETTINGS_FILE), encoding="utf-8") as f:
        settings = json.load(f)
    try:
        exported = load_export(os.path.join(inbox, APPLY_FILE), settings)
    except Refused as err:
        return {"refused": str(err)}
    n_params = len(exported.in_avals) - len(settings["inputs"])
    score = MODES[settings["mode"]](exported, settings, data)
    k = 1
    while True:
        path = os.path.join(inbox, checkpoint_name(k))
        if os.path.exists(path):
            try:
                leaves = read_checkpoint(path, exported.in_avals[:n_params])
            except Refused as err:
                write(outbox, refused_name(k), str(err).encode())
            else:
                buffer = io.BytesIO()
                np.savez(buffer, **score(leaves))
                write(outbox, outputs_name(k), buffer.getvalue())
            k += 1
        elif os.path.exists(os.path.join(inbox, DONE_FILE)):
            return {"scored": k - 1}
        else:
            time.sleep(POLL_S)


def load_export(path: str, settings: dict[str, Any]) -> Any:
    """The deserialized export, checked against the task's example and output shapes."""
    from jax import export

    with open(path, "rb") as f:
        raw = f.read()
    try:
        exported = export.deserialize(bytearray(raw))
    except Exception as err:  # noqa: BLE001 - any malformed artifact is the submission's
        raise Refused(f"the exported apply function could not be read: {type(err).__name__}: {err}") from None
    check_exported(exported, settings["inputs"], settings["outputs"])
    return exported


def read_checkpoint(path: str, avals: Any) -> list[Any]:
    """The parameter arrays arr_0, arr_1, ... as plain data: stored (uncompressed) members only,
    no pickles, each of the shape and dtype the export takes."""
    import numpy as np

    names = [f"arr_{i}" for i in range(len(avals))]
    try:
        with np.load(path, allow_pickle=False) as npz:
            infos = npz.zip.infolist()
            if any(info.compress_type != zipfile.ZIP_STORED for info in infos):
                raise Refused("the checkpoint holds compressed members; write it with np.savez")
            if sorted(npz.files) != sorted(names):
                raise Refused(f"the checkpoint holds {len(npz.files)} arrays; the apply function takes {len(names)}")
            arrays = [npz[name] for name in names]
    except (OSError, ValueError, zipfile.BadZipFile, AttributeError) as err:
        raise Refused(f"the checkpoint is not a readable .npz of arrays: {err}") from None
    for i, (array, aval) in enumerate(zip(arrays, avals)):
        if tuple(array.shape) != tuple(aval.shape) or str(array.dtype) != str(aval.dtype):
            raise Refused(
                f"checkpoint array {i} is {array.dtype}{list(array.shape)}; the apply function takes "
                f"{aval.dtype}{list(aval.shape)}"
            )
    return arrays


def map_examples(exported: Any, settings: dict[str, Any], data: str) -> Callable[[list[Any]], dict[str, Any]]:
    """The outputs of every example, one call per example (see the module's docstring)."""
    import jax
    import numpy as np

    inputs = [np.load(os.path.join(data, f"input_{i}.npy"), mmap_mode="r") for i in range(len(settings["inputs"]))]
    count = len(inputs[0])
    chunk = max(1, min(int(settings.get("chunk") or DEFAULT_CHUNK), count))

    def one(leaves, example):
        return tuple(jax.tree_util.tree_leaves(exported.call(*leaves, *example)))

    every = jax.jit(lambda leaves, examples: jax.lax.map(lambda example: one(leaves, example), examples))

    def score(leaves: list[Any]) -> dict[str, Any]:
        kept: list[list[Any]] = [[] for _ in settings["outputs"]]
        for first in range(0, count, chunk):
            part = [np.asarray(x[first : first + chunk]) for x in inputs]
            n = len(part[0])
            if n < chunk:  # the last chunk is padded, so that one compiled call serves them all
                part = [np.concatenate([p, np.zeros((chunk - n, *p.shape[1:]), p.dtype)]) for p in part]
            for j, result in enumerate(every(leaves, tuple(part))):
                kept[j].append(np.asarray(result)[:n])
        return {f"output_{j}": np.concatenate(parts) for j, parts in enumerate(kept)}

    return score


MODES: dict[str, Callable[[Any, dict[str, Any], str], Callable[[list[Any]], dict[str, Any]]]] = {
    "map": map_examples,
    "sokoban": play_levels,  # the station steps the held-out levels itself (sokoban_scoring.py)
    "windows": score_windows,  # forecasting: windows cut and their errors summed here (window_scoring.py)
}


def write(folder: str, name: str, data: bytes) -> None:
    """A file that appears whole: written under another name, then renamed."""
    partial = os.path.join(folder, name + ".partial")
    with open(partial, "wb") as f:
        f.write(data)
    os.replace(partial, os.path.join(folder, name))
