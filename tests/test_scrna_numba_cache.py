"""The scRNA scorer's numba kernels keep numba's on-disk cache where numba can keep one, and
compile per process, as before, where it cannot."""
from __future__ import annotations

import pytest

numba = pytest.importorskip("numba")

from numba.core import caching  # noqa: E402

from evaluators.scrna.numba_cache import njit_cached  # noqa: E402


def add(a: int, b: int) -> int:
    return a + b


def test_a_kernel_keeps_numbas_disk_cache() -> None:
    kernel = njit_cached(add)
    assert kernel(2, 3) == 5
    assert not isinstance(kernel._cache, caching.NullCache)


def test_without_a_folder_for_the_cache_the_kernel_still_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(caching.CacheImpl, "_locator_classes", [])  # numba finds nowhere to write
    with pytest.raises(RuntimeError):
        numba.njit(cache=True)(add)  # what scoring would have died of
    kernel = njit_cached(add)
    assert kernel(2, 3) == 5
    assert isinstance(kernel._cache, caching.NullCache)
