"""The batch-integration task's data root, and the station's secret behind its simulated data.

The secret itself (how it is made, kept and used to key the simulator's seeds) is shared by every
simulated task: evaluators/secret.py. This module names the task's data root (the datasets, their
secret and compiled kernels) and re-exports the shared parts the task's modules use.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..secret import KEY_BYTES, SECRET_DIR, SECRET_FILE, fingerprint, keyed_seed, secret_dir, station_secret

__all__ = [
    "KEY_BYTES",
    "SECRET_DIR",
    "SECRET_FILE",
    "data_root",
    "fingerprint",
    "keyed_seed",
    "secret_dir",
    "station_secret",
]


def data_root() -> Path:
    """The station's data cache for this task: the datasets, their secret and compiled kernels."""
    return Path(os.environ.get("STATION_SCRNA_DATA") or Path.home() / ".cache" / "station" / "scrna")
