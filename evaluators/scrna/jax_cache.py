"""The scorer's JAX programs (scib-metrics' silhouette and LISI kernels) compiled once per data
folder instead of once per scoring process: about 2.5 s of every process's first scoring.

JAX's own persistent cache, in `jax-compiled/` of the task's data folder (data_root()). That
folder belongs to the station's user, like the held-out data beside it: a sandboxed run has no
such folder in its root and runs under another uid, so it can neither read the programs nor
plant its own. Where the folder cannot be made, JAX compiles in each process, as before.
"""

from __future__ import annotations

import functools
from pathlib import Path

from .secret import data_root


def jax_programs_folder() -> Path:
    """Where the scorer's compiled programs are kept; the task hides it from runs (private_paths)
    wherever an isolation mode would show the host read-only."""
    return data_root() / "jax-compiled"


@functools.cache
def cache_jax_programs() -> None:
    """Before the scorer's first compilation (a no-op afterwards)."""
    import jax

    folder = jax_programs_folder()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # its kernels compile fast, but many
