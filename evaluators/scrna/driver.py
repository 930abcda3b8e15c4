"""The code the station appends to a batch-integration submission before running it.

It runs inside the sandbox, next to the agent's code: it reads the task's input, calls the
agent's `eliminate_batch_effect_fn` on a copy, checks the contract and returns plain arrays
(an embedding and/or a kNN graph as CSR parts; the corrected counts too, dense or as CSR parts,
when the task computes HVG overlap). Contract problems come back as
`contract_error` (reported to the author, never debugged); an exception raised inside the
agent's function is an ordinary crash (the debugger may fix it). Everything here is untrusted
like the submission itself: scoring happens outside, on the returned arrays only.
"""

INPUT_DIR = "task_data/batch_integration"  # where the input is mounted, relative to the run's directory
MAX_DIMENSIONS = 5000  # an embedding's widest; the station's scorer checks it again (result_check.py)

_TEMPLATE = """

# ---- appended by the station: runs your function on the task's data (not part of your code) ----
def _station_integrate():
    import numpy as _np
    import scipy.sparse as _sp
    import anndata as _ad
    if "test" in globals() and callable(globals()["test"]):
        print("=== Test Mode Detected ===")
        globals()["test"]()
        return {"test_mode": True}
    if not callable(globals().get("eliminate_batch_effect_fn")):
        return {"contract_error": "submission.py must define eliminate_batch_effect_fn(adata) -> AnnData"}
    _data = _ad.read_h5ad("%(input)s/train_input.h5ad")
    _ids = list(_data.obs["observation_joinid"])
    _out = eliminate_batch_effect_fn(_data.copy())
    if not isinstance(_out, _ad.AnnData):
        return {"contract_error": "eliminate_batch_effect_fn must return an AnnData, got %%s" %% type(_out).__name__}
    if _out.n_obs != len(_ids):
        return {"contract_error": "the result has %%d cells; the input had %%d (keep every cell, in order)"
                                  %% (_out.n_obs, len(_ids))}
    if "observation_joinid" in _out.obs and list(_out.obs["observation_joinid"]) != _ids:
        return {"contract_error": "the cells were reordered; keep the input's cell order"}
    _res = {"n_obs": int(_out.n_obs)}
    _emb = _out.obsm["X_emb"] if "X_emb" in _out.obsm else None
    if _emb is None and "corrected_counts" in _out.layers:
        import scanpy as _sc
        _tmp = _ad.AnnData(_out.layers["corrected_counts"])
        _sc.pp.pca(_tmp, n_comps=min(50, min(_tmp.shape) - 1), svd_solver="arpack")
        _emb = _tmp.obsm["X_pca"]
    if _emb is not None:
        _emb = _emb.toarray() if _sp.issparse(_emb) else _np.asarray(_emb)
        if _emb.ndim != 2 or _emb.shape[0] != len(_ids) or not 1 <= _emb.shape[1] <= %(width)d:
            return {"contract_error": "obsm['X_emb'] must be cells x dimensions (1 to %(width)d), got %%s"
                                      %% (_emb.shape,)}
        _res["X_emb"] = _emb.astype(_np.float32)
    if "connectivities" in _out.obsp and "distances" in _out.obsp:
        _res["uns_neighbors"] = bool("neighbors" in _out.uns)
        for _name in ("connectivities", "distances"):
            _g = _sp.csr_matrix(_out.obsp[_name])
            if _g.shape != (len(_ids), len(_ids)):
                return {"contract_error": "obsp['%%s'] must be cells x cells, got %%s" %% (_name, _g.shape)}
            _g.sort_indices()
            _res[_name + "_data"] = _g.data.astype(_np.float32)
            _res[_name + "_indices"] = _g.indices.astype(_np.int64)
            _res[_name + "_indptr"] = _g.indptr.astype(_np.int64)
    if %(counts)s and "corrected_counts" in _out.layers:
        _c = _out.layers["corrected_counts"]
        if _c.ndim != 2 or _c.shape[0] != len(_ids):
            return {"contract_error": "layers['corrected_counts'] must be cells x genes, got %%s" %% (_c.shape,)}
        if _sp.issparse(_c):  # sparse stays sparse (CSR parts), dense stays dense: the smaller either way
            _c = _sp.csr_matrix(_c, dtype=_np.float32)
            _c.sort_indices()
            _res["corrected_counts_data"] = _c.data
            _res["corrected_counts_indices"] = _c.indices.astype(_np.int32)
            _res["corrected_counts_indptr"] = _c.indptr.astype(_np.int64)
            _res["corrected_counts_n_genes"] = int(_c.shape[1])
        else:
            _res["corrected_counts"] = _np.asarray(_c, dtype=_np.float32)
    if "X_emb" not in _res and "connectivities_data" not in _res:
        return {"contract_error": "the result has neither obsm['X_emb'] nor both obsp['connectivities'] and "
                                  "obsp['distances']"}
    return _res
"""


def driver(return_counts: bool = False) -> str:
    """The appended source; `return_counts` also returns layers['corrected_counts'] (for HVG overlap)."""
    return _TEMPLATE % {"input": INPUT_DIR, "counts": repr(bool(return_counts)), "width": MAX_DIMENSIONS}


DRIVER = driver()
