"""The trusted side's check of a batch-integration result, before anything is built from it.

The driver (driver.py) runs inside the sandbox, beside the submission, so a submission can skip
it and write a result of its own: every field is checked here again, for its type, its dtype and
its shape, against the solution's cells and genes. A result that fails is the submission's fault:
`problem` names the first field that breaks the contract, in one line; the scorer builds nothing
from a result that has one. What is left to score_arrays (finite values, index ranges, a sorted
indptr) raises ValueError there, also the submission's.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from .driver import MAX_DIMENSIONS

GRAPHS = ("connectivities", "distances")
PARTS = ("data", "indices", "indptr")
MAX_ENTRIES_PER_CELL = MAX_DIMENSIONS  # a graph may hold as many numbers a cell as an embedding
NUMBERS, INTEGERS = "iuf", "iu"  # numpy dtype kinds: real numbers; integers


class Malformed(Exception):
    """One field of the result breaks the contract; the message says which and how."""


def problem(value: dict[str, Any], n_cells: int, n_genes: Callable[[], int]) -> str | None:
    """Why `value` (the run's returned dict) cannot be scored, or None when its fields are well formed.
    `n_genes()`: the solution's genes, asked only of a result with corrected counts."""
    try:
        _check(value, n_cells, n_genes)
    except Malformed as err:
        return str(err)
    return None


def _check(value: dict[str, Any], n: int, genes: Callable[[], int]) -> None:
    count: Any = value.get("n_obs")
    if not _is_int(count):
        raise Malformed(f"n_obs must be the number of cells, got {_kind(count)}")
    if int(count) != n:
        raise Malformed(f"the result has {int(count):,} cells; the data has {n:,}")
    if "X_emb" in value:
        _array(value, "X_emb", 2, NUMBERS)
        emb = value["X_emb"]
        if emb.shape[0] != n or not 1 <= emb.shape[1] <= MAX_DIMENSIONS:
            raise Malformed(
                f"obsm['X_emb'] must be cells x dimensions ({n:,} x 1 to {MAX_DIMENSIONS:,}), got {emb.shape}"
            )
    if "uns_neighbors" in value and not isinstance(value["uns_neighbors"], (bool, np.bool_)):
        raise Malformed(f"uns_neighbors must be true or false, got {_kind(value['uns_neighbors'])}")
    graph_keys = [f"{g}_{p}" for g in GRAPHS for p in PARTS]
    if any(key in value for key in graph_keys):
        for name in GRAPHS:
            _csr(value, f"obsp['{name}']", name, n, n * MAX_ENTRIES_PER_CELL)
    _counts(value, n, genes)
    if "X_emb" not in value and "connectivities_data" not in value:
        raise Malformed("the result has neither obsm['X_emb'] nor both obsp['connectivities'] and obsp['distances']")


def _counts(value: dict[str, Any], n: int, n_genes: Callable[[], int]) -> None:
    """layers['corrected_counts'], dense or as CSR parts: cells x at most the solution's genes."""
    if "corrected_counts" not in value and not any(k.startswith("corrected_counts_") for k in value):
        return
    genes = n_genes()
    if "corrected_counts" in value:
        _array(value, "corrected_counts", 2, NUMBERS)
        shape = value["corrected_counts"].shape
        if shape[0] != n or not 1 <= shape[1] <= genes:
            raise Malformed(f"layers['corrected_counts'] must be cells x genes ({n:,} x 1 to {genes:,}), got {shape}")
    else:
        width: Any = value.get("corrected_counts_n_genes")
        if not _is_int(width) or not 1 <= int(width) <= genes:
            raise Malformed(
                f"corrected_counts_n_genes must be a number of genes from 1 to {genes:,}, got {_kind(width)}"
            )
        _csr(value, "layers['corrected_counts']", "corrected_counts", n, n * int(width))


def _csr(value: dict[str, Any], shown: str, prefix: str, rows: int, max_entries: int) -> None:
    """The three parts of a CSR matrix of `rows` rows: 1-d arrays of the right kinds and lengths
    (the column range is checked with the values, in score_arrays)."""
    for part in PARTS:
        key = f"{prefix}_{part}"
        if key not in value:
            raise Malformed(f"{shown} is missing its {part} ({key}): a sparse matrix needs data, indices and indptr")
        _array(value, key, 1, NUMBERS if part == "data" else INTEGERS)
    data, indices, indptr = (value[f"{prefix}_{part}"] for part in PARTS)
    if len(indptr) != rows + 1:
        raise Malformed(f"{shown}: indptr must hold {rows + 1:,} offsets (cells + 1), got {len(indptr):,}")
    if len(data) != len(indices):
        raise Malformed(f"{shown}: data and indices differ in length ({len(data):,} and {len(indices):,})")
    if len(indices) > max_entries:
        raise Malformed(f"{shown} holds {len(indices):,} entries; at most {max_entries:,} are accepted")


def _array(value: dict[str, Any], key: str, ndim: int, kinds: str) -> None:
    item = value[key]
    if not isinstance(item, np.ndarray):
        raise Malformed(f"{key} must be an array, got {_kind(item)}")
    if item.ndim != ndim:
        raise Malformed(f"{key} must be a {ndim}-d array, got {item.ndim}-d of shape {item.shape}")
    if item.dtype.kind not in kinds:
        wanted = "integers" if kinds == INTEGERS else "real numbers"
        raise Malformed(f"{key} must hold {wanted}, got dtype {item.dtype}")


def _is_int(item: Any) -> bool:
    return isinstance(item, numbers.Integral) and not isinstance(item, (bool, np.bool_))


def _kind(item: Any) -> str:
    if isinstance(item, np.ndarray):
        return f"an array of shape {item.shape} and dtype {item.dtype}"
    if item is None:
        return "nothing"
    shown = repr(item) if isinstance(item, (numbers.Number, np.generic)) else ""
    return f"{type(item).__name__} {shown}".strip()
