"""UMAP's graph kernels compiled once per machine instead of once per scoring process.

scanpy builds the neighbour graph with two numba kernels of umap (`smooth_knn_dist`,
`compute_membership_strengths`) that umap compiles without numba's on-disk cache, so every
process that scores paid about 3 s for them. Asking numba to cache them changes nothing of what
they compute, only where the machine code comes from the second time: beside umap's source
when that folder is writable, else numba's per-user cache folder. Both belong to the station's
user; a sandboxed run has neither in its root and runs under another uid. Where numba finds no
folder it may write, the kernels compile in each process, as before.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


@functools.cache
def cache_umap_kernels() -> None:
    """Before umap first compiles them (a no-op afterwards)."""
    from umap import umap_, utils

    for kernel in (umap_.smooth_knn_dist, umap_.compute_membership_strengths, utils.tau_rand, utils.tau_rand_int):
        if not kernel.signatures:  # compiling already happened in this process: leave it be
            try:
                kernel.enable_caching()
            except RuntimeError:  # numba has no folder to keep its cache in
                return


def njit_cached(function: Callable[..., Any], **options: Any) -> Callable[..., Any]:
    """`numba.njit` with the on-disk cache where numba can keep one."""
    import numba

    try:
        return numba.njit(cache=True, **options)(function)
    except RuntimeError:  # numba has no folder to keep its cache in
        return numba.njit(**options)(function)
