"""What agents write: how alike their texts are per window (TF-IDF cosine similarity) and the research
directions they take (k-means clusters of those vectors, named by their top terms).

Settings, fixed so the same tables give the same numbers: a text is its title and its text;
scikit-learn's TfidfVectorizer with English stop words, sublinear tf (1 + log tf), L2-normalised rows,
the 20,000 most frequent terms of a vocabulary learnt on at most FIT_TEXTS texts taken evenly from
the texts in (tick, record) order; every text is then vectorised with it. A text left with no term
(all stop words) counts among the texts but not in the similarity.

Directions: a TruncatedSVD of the vectors (at most 50 components, fixed seed, fitted on at most
SVD_TEXTS texts taken evenly), rows re-normalised, then MiniBatchKMeans (fixed seed) for each k in
2..12 on at most CLUSTER_TEXTS texts taken evenly; k is the one with the best silhouette (Rousseeuw
1987) on them (ties: the smaller k). Every text is then assigned to its nearest centre. Fewer than 3
distinct texts among those: a single direction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from scipy import sparse

from station.study import windows

if TYPE_CHECKING:  # scikit-learn is imported where it is used: ~1 CPU-s for whoever only imports this
    from sklearn.cluster import MiniBatchKMeans

    from station.study import Study

FIT_TEXTS = 20_000  # texts the vocabulary is learnt on
SVD_TEXTS = 5_000  # texts the SVD is fitted on
CLUSTER_TEXTS = 2_000  # texts k-means and the silhouette are fitted on
KS = range(2, 13)  # the numbers of directions tried
TERMS = 5  # top terms naming a direction
SEED = 53


def vectorise(texts: pd.DataFrame) -> tuple[sparse.csr_matrix, list[str]]:
    """The TF-IDF rows of the texts (in the given order) and the vocabulary's terms."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    documents = (texts["title"].fillna("") + "\n" + texts["text"].fillna("")).tolist()
    vectorizer = TfidfVectorizer(stop_words="english", sublinear_tf=True, max_features=20_000, dtype=np.float64)
    try:
        vectorizer.fit(_even(documents, FIT_TEXTS))
    except ValueError:  # no term at all: every text is empty or stop words
        return sparse.csr_matrix((len(documents), 0)), []
    return vectorizer.transform(documents).tocsr(), vectorizer.get_feature_names_out().tolist()


def mean_similarity(rows: sparse.csr_matrix) -> float:
    """Mean cosine similarity over the pairs of the non-empty L2-normalised rows, without the n x n
    matrix: the sum over i != j of v_i . v_j is ||sum_i v_i||^2 - n. NaN under two rows."""
    rows = rows[rows.getnnz(axis=1) > 0]
    n = rows.shape[0]
    if n < 2:
        return float("nan")
    total = np.asarray(rows.sum(axis=0)).ravel()
    return float((total @ total - n) / (n * (n - 1)))


def directions(vectors: sparse.csr_matrix, terms: list[str]) -> tuple[np.ndarray, list[str]]:
    """Each text's direction (-1: a text with no term) and each direction's top terms; directions are
    numbered by size, largest 0."""
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.decomposition import TruncatedSVD
    from sklearn.metrics import silhouette_score
    from sklearn.preprocessing import normalize

    labels = np.full(vectors.shape[0], -1)
    filled = np.flatnonzero(vectors.getnnz(axis=1) > 0)
    if filled.size == 0:
        return labels, []
    rows = vectors[filled]
    distinct = _distinct_rows(rows[_even_index(rows.shape[0], CLUSTER_TEXTS)])  # those k-means sees
    if distinct < 3 or len(terms) < 2:
        labels[filled] = 0
        centre = np.asarray(rows.mean(axis=0)).ravel()
        return labels, [_top_terms(centre, terms)]
    svd = TruncatedSVD(n_components=min(50, len(terms) - 1, rows.shape[0] - 1), random_state=SEED)
    svd.fit(rows[_even_index(rows.shape[0], SVD_TEXTS)])
    reduced = normalize(svd.transform(rows))
    sample = reduced[_even_index(reduced.shape[0], CLUSTER_TEXTS)]
    best: tuple[float, MiniBatchKMeans] | None = None
    for k in KS:
        if k >= min(distinct, sample.shape[0]):
            break
        model = MiniBatchKMeans(n_clusters=k, random_state=SEED, n_init=3, batch_size=1024).fit(sample)
        if len(set(model.labels_)) < 2:
            continue
        score = silhouette_score(sample, model.labels_, random_state=SEED)
        if best is None or score > best[0]:
            best = (score, model)
    if best is None:
        labels[filled] = 0
        return labels, [_top_terms(np.asarray(rows.mean(axis=0)).ravel(), terms)]
    raw = best[1].predict(reduced)
    sizes = np.bincount(raw, minlength=best[1].n_clusters)
    order = sorted(range(len(sizes)), key=lambda c: (-sizes[c], c))
    order = [c for c in order if sizes[c] > 0]
    renumber = {old: new for new, old in enumerate(order)}
    labels[filled] = [renumber[c] for c in raw]
    names = [_top_terms(svd.inverse_transform(best[1].cluster_centers_[c : c + 1]).ravel(), terms) for c in order]
    return labels, names


def measure(study: Study) -> tuple[pd.DataFrame, pd.DataFrame, float]:
    """The diversity table (a row per window), the directions table, and the whole range's mean similarity."""
    texts = study.texts.sort_values(["tick", "record"], kind="stable").reset_index(drop=True)
    vectors, terms = vectorise(texts)
    labels, names = directions(vectors, terms)
    texts = texts.assign(direction=labels)
    starts = windows.starts(study, texts["tick"]) if len(texts) else np.zeros(0, dtype="int64")
    rows = []
    for start, end in windows.bounds(study):
        inside = np.flatnonzero(starts == start)
        similarity = mean_similarity(vectors[inside])
        found = texts["direction"].iloc[inside]
        rows.append(
            {
                "window_start": start,
                "window_end": end,
                "texts": int(inside.size),
                "mean_similarity": similarity,
                "diversity": 1 - similarity,
                "directions": int(found[found >= 0].nunique()),
            }
        )
    assigned = texts[texts["direction"] >= 0].groupby("direction")
    table = pd.DataFrame(
        {
            "direction": range(len(names)),
            "terms": names,
            "texts": assigned.size().reindex(range(len(names)), fill_value=0).to_numpy(),
            "authors": assigned["author"].nunique().reindex(range(len(names)), fill_value=0).to_numpy(),
            "first_tick": assigned["tick"].min().reindex(range(len(names)), fill_value=0).to_numpy(),
            "last_tick": assigned["tick"].max().reindex(range(len(names)), fill_value=0).to_numpy(),
        }
    )
    return pd.DataFrame(rows), table, mean_similarity(vectors)


def _top_terms(weights: np.ndarray, terms: list[str]) -> str:
    top = sorted(range(len(terms)), key=lambda i: (-weights[i], terms[i]))[:TERMS]
    return ", ".join(terms[i] for i in top if weights[i] > 0)


def _distinct_rows(rows: sparse.csr_matrix) -> int:
    """Distinct vectors among the rows, up to 13 (enough to bound k)."""
    seen: set[bytes] = set()
    rows.sort_indices()
    for i in range(rows.shape[0]):
        row = rows.getrow(i)
        seen.add(row.indices.tobytes() + np.round(row.data, 9).tobytes())
        if len(seen) > max(KS):
            break
    return len(seen)


def _even_index(n: int, most: int) -> np.ndarray:
    """At most `most` indices spread evenly over 0..n-1 (all of them when n <= most)."""
    if n <= most:
        return np.arange(n)
    return np.linspace(0, n - 1, most).round().astype(int)


def _even(items: list[str], most: int) -> list[str]:
    return [items[i] for i in _even_index(len(items), most)]
