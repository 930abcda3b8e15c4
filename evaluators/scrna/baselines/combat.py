"""ComBat on the genes, then PCA.

ComBat fits, for every gene, a location and scale per batch and shrinks them towards the
average over genes (empirical Bayes), then removes them. The corrected expression's principal
components are the embedding; the kNN graph is built from them by the station. The corrected
expression is returned too (a "feature" output, for the HVG-overlap metric when it is asked for).
"""

import numpy as np
import scanpy as sc


def eliminate_batch_effect_fn(adata):
    work = adata.copy()
    work.X = (
        work.layers["normalized"].toarray()
        if hasattr(work.layers["normalized"], "toarray")
        else np.asarray(work.layers["normalized"])
    )
    sc.pp.combat(work, key="batch")
    adata.layers["corrected_counts"] = np.asarray(work.X, dtype=np.float32)
    sc.pp.pca(work, n_comps=50, svd_solver="arpack", random_state=0)
    adata.obsm["X_emb"] = work.obsm["X_pca"]
    return adata
