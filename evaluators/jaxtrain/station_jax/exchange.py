"""The training run's side of two-stage scoring: export the network once, hand over checkpoints.

The run never sees the split it is scored on. It exports its apply function (`jax.export`,
StableHLO) for ONE example, with the parameters as arguments, and after each epoch writes the
parameters into its `checkpoints/` folder; the station takes each checkpoint, scores it in a
separate sandbox that runs none of the submission's code, and writes `stop` when it has seen
enough (patience, epochs or its own clock). Nothing here is trusted: the station checks the
export and reads the checkpoints as plain arrays (evaluators/jaxtrain/two_stage.py).

Files (names shared with the station, two_stage.py):
- `apply.jaxexport`: the serialized export, written once before training;
- `checkpoint.npz`: the current parameters as arr_0, arr_1, ... (the export's leading arguments),
  written through a `.partial` file and a rename; the run waits until the station took it;
- `stop`: written by the station into `control/`, a folder of its own mounted read-only into the
  run (not into `checkpoints/`: the station never opens a path the run controls); the run stops
  training when it sees it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

APPLY_FILE, CHECKPOINT_FILE, STOP_FILE = "apply.jaxexport", "checkpoint.npz", "stop"
CONTROL_DIR = "control"  # where the station writes `stop`, as the run sees it
POLL_S = 0.02


def export_one(
    apply_one: Callable[..., Any], leaves: Sequence[Any], example: Sequence[tuple[tuple[int, ...], str]]
) -> bytes:
    """The serialized export of `apply_one(*leaves, *example_inputs) -> tuple of outputs`, for the
    CPU, with the shapes and dtypes of `leaves` and of one example (no batch axis)."""
    import jax
    from jax import export

    specs = [jax.ShapeDtypeStruct(leaf.shape, leaf.dtype) for leaf in leaves]
    specs += [jax.ShapeDtypeStruct(tuple(shape), dtype) for shape, dtype in example]
    return bytes(export.export(jax.jit(apply_one), platforms=["cpu"])(*specs).serialize())


class Exchange:
    """The run's checkpoint folder (the station's `checkpoints/` mount), and the station's `control/`."""

    def __init__(self, folder: str, control: str = CONTROL_DIR) -> None:
        self.folder, self.control = folder, control
        self.waited_s = 0.0  # how long the run waited for the station to take its checkpoints

    def _path(self, name: str) -> str:
        return os.path.join(self.folder, name)

    def _write(self, name: str, write: Callable[[Any], None]) -> None:
        partial = self._path(name + ".partial")
        with open(partial, "wb") as f:
            write(f)
        os.replace(partial, self._path(name))

    def publish(self, exported: bytes) -> None:
        self._write(APPLY_FILE, lambda f: f.write(exported))

    def stopped(self) -> bool:
        return os.path.exists(os.path.join(self.control, STOP_FILE))

    def offer(self, leaves: Sequence[Any]) -> bool:
        """Hand over one checkpoint and wait until the station took it (True) or said stop (False)."""
        import numpy as np

        if self.stopped():
            return False
        arrays = [np.asarray(leaf) for leaf in leaves]
        began = time.monotonic()
        self._write(CHECKPOINT_FILE, lambda f: np.savez(f, *arrays))
        try:
            while os.path.exists(self._path(CHECKPOINT_FILE)):
                if self.stopped():
                    return False
                time.sleep(POLL_S)
            return not self.stopped()
        finally:
            self.waited_s += time.monotonic() - began
