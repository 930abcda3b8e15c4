"""A batch-balanced kNN graph (the idea of BBKNN), written from scratch.

Each cell takes its k nearest neighbours *in every batch* separately (in PCA space), so its
neighbourhood is balanced across batches by construction. Edge weights are Gaussian in the
distance, scaled per cell by its farthest neighbour, and the graph is made symmetric. The
embedding itself is left unintegrated (PCA), as BBKNN only corrects the graph.
"""

import numpy as np
import scanpy as sc
import scipy.sparse as sp
from sklearn.neighbors import NearestNeighbors

NEIGHBOURS_PER_BATCH = 4


def eliminate_batch_effect_fn(adata):
    work = adata.copy()
    work.X = work.layers["normalized"].copy()
    sc.pp.pca(work, n_comps=50, svd_solver="arpack", random_state=0)
    pcs = work.obsm["X_pca"]
    batches = np.asarray(adata.obs["batch"].astype(str))
    n = adata.n_obs
    rows, cols, dists = [], [], []
    for batch in np.unique(batches):
        members = np.flatnonzero(batches == batch)
        k = min(NEIGHBOURS_PER_BATCH, len(members))
        search = NearestNeighbors(n_neighbors=k).fit(pcs[members])
        distance, index = search.kneighbors(pcs)
        rows.append(np.repeat(np.arange(n), k))
        cols.append(members[index].ravel())
        dists.append(distance.ravel())
    rows, cols, dists = np.concatenate(rows), np.concatenate(cols), np.concatenate(dists)
    keep = rows != cols  # a cell is not its own neighbour
    rows, cols, dists = rows[keep], cols[keep], dists[keep]
    distances = sp.csr_matrix((dists, (rows, cols)), shape=(n, n))
    scale = np.maximum(distances.max(axis=1).toarray().ravel(), 1e-12)
    weights = np.exp(-((dists / scale[rows]) ** 2))
    connectivities = sp.csr_matrix((weights, (rows, cols)), shape=(n, n))
    connectivities = connectivities.maximum(connectivities.T).tocsr()
    distances = distances.maximum(distances.T).tocsr()
    adata.obsp["connectivities"] = connectivities
    adata.obsp["distances"] = distances
    # registered as the neighbour graph: without this the scorer rebuilds the graph from X_emb
    adata.uns["neighbors"] = {"connectivities_key": "connectivities", "distances_key": "distances"}
    adata.obsm["X_emb"] = pcs
    return adata
