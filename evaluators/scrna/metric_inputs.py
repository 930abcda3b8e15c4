"""A submission's result made ready for the metrics (OpenProblems' `process_integration`, steps 1 to 3
of the post-processing in metrics.py's docstring): its cells checked against the solution's, the
embedding (submitted, or the PCA of corrected counts) and the neighbour graph (submitted, or built
from the embedding), each with the reason when it is missing or unusable."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

N_NEIGHBORS = 15  # sc.pp.neighbors default, used by OpenProblems' process_integration
N_PCS = 50
T = TypeVar("T")


class MetricSkipped(Exception):
    """A metric that cannot be computed for this result; the message is the reason."""


@dataclass
class Inputs:
    solution: Any
    n: int
    batch: np.ndarray  # integer codes
    labels: np.ndarray  # integer codes
    emb: np.ndarray | None = None
    emb_problem: str = ""
    conn: Any = None  # scipy CSR, float64
    graph_problem: str = ""
    graph_source: str = ""
    corrected: Any = None  # layers['corrected_counts'] of a feature output (cells x the solution's genes)
    clustering: str = "paper"  # how Leiden clusters the graph (clustering.CLUSTERINGS)
    cache: dict[str, Any] = field(default_factory=dict)

    def need_emb(self) -> np.ndarray:
        if self.emb is None:
            raise MetricSkipped(self.emb_problem or "needs an embedding (obsm['X_emb'] or corrected counts)")
        return self.emb

    def need_corrected(self) -> Any:
        if self.corrected is None:
            raise MetricSkipped("needs corrected counts (layers['corrected_counts']): a feature output")
        return self.corrected

    def need_graph(self) -> Any:
        if self.conn is None:
            raise MetricSkipped(self.graph_problem or "needs a neighbour graph")
        return self.conn


# What depends on the solution alone (PCR's and the cell-cycle metric's regressions on the unintegrated
# data, the cell-cycle scores) is the same for every submission scored against it: computed once per
# solution object while it lives, instead of at every scoring (half of a warm scoring's CPU). The
# metrics never change a solution, and a dataset reads its file into a new object when it changes.
# A dataset's solution also keeps them on disk (keep_terms_on_disk): a new scoring process reads
# them instead of computing them again (2.3 CPU-s of the small data's first scoring in a process).
_SOLUTION_TERMS: dict[int, tuple[weakref.ref, dict[tuple, Any], tuple[Path, str] | None]] = {}


def _entry(solution: Any) -> tuple[weakref.ref, dict[tuple, Any], tuple[Path, str] | None]:
    ident = id(solution)
    entry = _SOLUTION_TERMS.get(ident)
    if entry is None or entry[0]() is not solution:  # a new object, or another one at a freed address
        entry = (weakref.ref(solution, lambda _: _SOLUTION_TERMS.pop(ident, None)), {}, None)
        _SOLUTION_TERMS[ident] = entry
    return entry


def keep_terms_on_disk(solution: Any, folder: Path, tag: str) -> None:
    """Keep `solution`'s terms in `folder` too, under `tag` (what they were computed from: the
    solution's file and the metrics' version). The folder is the station's alone (beside the
    labels, hidden from runs): what is read from it is plain arrays, never a pickle."""
    ref, terms, _ = _entry(solution)
    _SOLUTION_TERMS[id(solution)] = (ref, terms, (folder, tag))


def solution_term(solution: Any, key: tuple, compute: Callable[[], T]) -> T:
    """`compute()` for `solution` under `key`, computed at its first use and kept with the solution
    (and on disk where keep_terms_on_disk said where)."""
    _, terms, disk = _entry(solution)
    if key not in terms:
        path = (
            None
            if disk is None
            else disk[0] / (hashlib.sha256(json.dumps([disk[1], repr(key)]).encode()).hexdigest()[:24] + ".npz")
        )
        stored = None if path is None else _read_term(path)
        terms[key] = compute() if stored is None else stored
        if path is not None and stored is None:
            _write_term(path, terms[key])
    return terms[key]


def _read_term(path: Path) -> Any:
    """A stored term: a float, or a tuple of arrays and floats; None when absent or unreadable."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            single, *parts = (npz[f"arr_{i}"] for i in range(len(npz.files)))
    except (OSError, ValueError, KeyError, EOFError):
        return None
    values = [part.item() if part.ndim == 0 else part for part in parts]
    return values[0] if single else tuple(values)


def _write_term(path: Path, value: Any) -> None:
    """Written whole or not at all (a rename): another process may read it at any moment."""
    parts = list(value) if isinstance(value, tuple) else [value]
    arrays = [np.asarray(not isinstance(value, tuple)), *(np.asarray(part) for part in parts)]  # arr_0, arr_1...
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, suffix=".part")
        with os.fdopen(fd, "wb") as out:
            np.savez(out, *arrays)
        os.replace(temporary, path)
    except OSError:  # a folder it cannot write: the term stays in memory only, as before
        return


def check_cells(result: Any, solution: Any) -> None:
    if result.n_obs != solution.n_obs:
        raise ValueError("cells reordered or dropped")
    key = "observation_joinid"
    if key in result.obs and key in solution.obs:
        if not np.array_equal(result.obs[key].astype(str).to_numpy(), solution.obs[key].astype(str).to_numpy()):
            raise ValueError("cells reordered or dropped")
        return
    mine, theirs = result.obs_names, solution.obs_names
    if not mine.equals(theirs) and mine.is_unique and theirs.is_unique and set(mine) == set(theirs):
        raise ValueError("cells reordered or dropped")


def _codes(values: Any) -> np.ndarray:
    import pandas as pd

    return np.asarray(pd.Categorical(np.asarray(values).astype(str)).codes, dtype=np.int64)


def prepare(result: Any, solution: Any) -> Inputs:
    """The labels from the solution, then the embedding and the neighbour graph of `result`."""
    n = solution.n_obs
    inputs = Inputs(
        solution=solution, n=n, batch=_codes(solution.obs["batch"]), labels=_codes(solution.obs["cell_type"])
    )
    _embedding(result, inputs)
    _graph(result, inputs)
    if "corrected_counts" in result.layers:
        inputs.corrected = result.layers["corrected_counts"]
    return inputs


def _embedding(result: Any, inputs: Inputs) -> None:
    """Step 2: `inputs.emb` from obsm['X_emb'] or the PCA of corrected counts, or `inputs.emb_problem`."""
    import scanpy as sc
    import scipy.sparse as sp

    n = inputs.n
    emb = None
    if "X_emb" in result.obsm:
        emb = result.obsm["X_emb"]
        emb = emb.toarray() if sp.issparse(emb) else np.asarray(emb)
        source = "obsm['X_emb']"
    elif "corrected_counts" in result.layers:
        source = "the PCA of layers['corrected_counts']"
        try:
            counts = result.layers["corrected_counts"]
            if counts.shape != (n, counts.shape[1]) or counts.shape[1] < 2:
                raise ValueError(f"corrected_counts has shape {counts.shape}")
            if sp.issparse(counts):
                counts = counts.astype(np.float32) if not np.issubdtype(counts.dtype, np.floating) else counts
                finite = bool(np.isfinite(counts.data).all())
                if counts.shape[0] * counts.shape[1] <= 50_000_000:  # dense arpack: same PCA, 3x faster
                    counts = counts.toarray()
            else:
                counts = np.asarray(counts, dtype=np.float32)
                finite = bool(np.isfinite(counts).all())
            if not finite:
                raise ValueError("corrected_counts contains NaN or infinite values")
            emb = sc.pp.pca(counts, n_comps=min(N_PCS, min(counts.shape) - 1), svd_solver="arpack", return_info=False)
        except Exception as exc:  # noqa: BLE001 - any failure of the user's result is reported, not raised
            inputs.emb_problem = f"PCA of corrected_counts failed: {one_line(exc)}"
            emb = None
    else:
        source = ""
        inputs.emb_problem = "the result has no embedding (obsm['X_emb'] or layers['corrected_counts'])"

    if emb is not None:
        if emb.ndim != 2 or emb.shape[0] != n or emb.shape[1] < 1:
            inputs.emb_problem = f"{source} has shape {emb.shape}; expected ({n}, dimensions)"
        elif not np.issubdtype(emb.dtype, np.number):
            inputs.emb_problem = f"{source} is not numeric ({emb.dtype})"
        else:
            emb = np.ascontiguousarray(emb, dtype=np.float32 if emb.dtype != np.float64 else np.float64)
            if not np.isfinite(emb).all():
                inputs.emb_problem = f"{source} contains NaN or infinite values"
            else:
                inputs.emb = emb


def _graph(result: Any, inputs: Inputs) -> None:
    """Step 3: `inputs.conn`, the submitted graph or one built from the embedding, or `inputs.graph_problem`."""
    import anndata as ad
    import pandas as pd
    import scanpy as sc
    import scipy.sparse as sp

    from .numba_cache import cache_umap_kernels

    n = inputs.n
    if "connectivities" in result.obsp:
        inputs.graph_source = "obsp['connectivities']"
        try:
            conn = result.obsp["connectivities"]
            conn = sp.csr_matrix(conn if sp.issparse(conn) else np.asarray(conn), dtype=np.float64)
            if conn.shape != (n, n):
                raise ValueError(f"obsp['connectivities'] has shape {conn.shape}; expected ({n}, {n})")
            conn.sum_duplicates()
            if not np.isfinite(conn.data).all():
                raise ValueError("obsp['connectivities'] contains NaN or infinite values")
            if (conn.data < 0).any():
                raise ValueError("obsp['connectivities'] has negative weights")
            conn.eliminate_zeros()
            conn.sort_indices()
            inputs.conn = conn
        except Exception as exc:  # noqa: BLE001 - any failure of the user's graph is reported, not raised
            inputs.graph_problem = one_line(exc)
    elif inputs.emb is not None:
        inputs.graph_source = f"{N_NEIGHBORS}-NN graph of X_emb"
        try:
            cache_umap_kernels()
            work = ad.AnnData(obs=pd.DataFrame(index=pd.RangeIndex(n).astype(str)))
            work.obsm["X_emb"] = inputs.emb
            sc.pp.neighbors(work, n_neighbors=N_NEIGHBORS, use_rep="X_emb", transformer="sklearn")
            conn = sp.csr_matrix(work.obsp["connectivities"], dtype=np.float64)
            conn.eliminate_zeros()
            conn.sort_indices()
            inputs.conn = conn
        except Exception as exc:  # noqa: BLE001 - any failure of the graph build is reported, not raised
            inputs.graph_problem = f"building the neighbour graph from X_emb failed: {one_line(exc)}"
    else:
        inputs.graph_problem = (
            "no neighbour graph: the result has no obsp['connectivities'] and no usable "
            f"embedding ({inputs.emb_problem})"
        )


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "no message"
    text = f"{type(exc).__name__}: {text}"
    return text if len(text) <= 300 else text[:297] + "..."
