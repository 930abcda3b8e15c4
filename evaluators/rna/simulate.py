"""A seeded synthetic stand-in for the 7 BEACON datasets, written in BEACON's own file layout.

The real data cannot be downloaded here, so each dataset is simulated with signal of the kinds
that matter in the real one, at three levels a model can reach:
- base composition (GC, AU or U content): even a network that averages per-position features
  (the Vanilla MLP baseline, which is linear in composition) learns it;
- motifs (poly(A) signals, upstream AUGs, a ribosome binding site, family motifs, the context
  of a modified site): a convolution finds them;
- position-specific effects (mismatches near the PAM, a position weight matrix, region-specific
  composition of a switch): they need position-aware models.
Labels add Gaussian noise, so no model is perfect. Every sequence's composition is drawn from
its own Dirichlet, so composition varies as much between sequences as it does in real libraries.

The generators and their labels (per dataset, `_apa` ...) are described in data/rna/README.md.
The same seed gives the same files byte for byte; the model parameters (weight matrices, family
compositions, motifs) come from their own stream, so every size of one seed shares one task. The
station's datasets give every stream a seed keyed by its secret (dataset.py, evaluators/secret.py),
each split's rows a stream of its own: the public seed alone draws none of them.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import numpy as np

RNA, DNA = b"ACGU", b"ACGT"  # in ASCII order, so searchsorted gives a letter's index
LETTERS = {alphabet: np.frombuffer(alphabet, dtype=np.uint8) for alphabet in (RNA, DNA)}
AMBIGUOUS = b"RYSWKMBDHV"
SIZES = {  # rows per dataset: train, val, test
    "small": (240, 80, 80),
    "default": (1200, 300, 300),
    "large": (12000, 2000, 2000),
}
SPLITS = ("train", "val", "test")

Rows = list[list[str]]


# -- sequences as (n, length) arrays of ASCII letter codes -------------------------------------------------
def draw(rng: np.random.Generator, probs: np.ndarray, length: int, alphabet: bytes) -> np.ndarray:
    """Letters drawn independently per position with per-row base probabilities `probs` (n, 4)."""
    cumulative = np.cumsum(probs, axis=1)
    index = (rng.random((len(probs), length))[:, :, None] > cumulative[:, None, :3]).sum(axis=2)
    return LETTERS[alphabet][index]


def compositions(rng: np.random.Generator, n: int, concentration: float, mean: np.ndarray | None = None) -> np.ndarray:
    """(n, 4) base probabilities around `mean` (uniform by default); larger concentration, less spread."""
    centre = np.full(4, 0.25) if mean is None else mean
    return rng.dirichlet(concentration * centre, size=n)


def plant(rng: np.random.Generator, codes: np.ndarray, rows: np.ndarray, motif: bytes, low: int, high: int) -> None:
    """Write `motif` into each of `rows` at a random start in [low, high)."""
    starts = rng.integers(low, high - len(motif) + 1, size=len(rows))
    pattern = np.frombuffer(motif, dtype=np.uint8)
    for row, start in zip(rows, starts):
        codes[row, start : start + len(motif)] = pattern


def count(codes: np.ndarray, motif: bytes) -> np.ndarray:
    """Occurrences of `motif` in each row (overlapping ones count; padding zeros never match)."""
    pattern = np.frombuffer(motif, dtype=np.uint8)
    windows = np.lib.stride_tricks.sliding_window_view(codes, len(pattern), axis=1)
    return (windows == pattern).all(axis=2).sum(axis=1)


def fraction(codes: np.ndarray, letters: bytes) -> np.ndarray:
    """The share of `letters` among the non-padding positions of each row."""
    present = codes > 0
    hits = np.isin(codes, np.frombuffer(letters, dtype=np.uint8)) & present
    return hits.sum(axis=1) / np.maximum(present.sum(axis=1), 1)


def cut(codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Zero every position past each row's length (variable-length sequences)."""
    return np.where(np.arange(codes.shape[1])[None, :] < lengths[:, None], codes, 0).astype(np.uint8)


def blur(rng: np.random.Generator, codes: np.ndarray, rate: float) -> np.ndarray:
    """Sequencing ambiguity: about `rate` of the letters become N, a tenth as many an IUPAC code."""
    out = codes.copy()
    present = out > 0
    roll = rng.random(out.shape)
    out[present & (roll < rate)] = ord("N")
    mixed = present & (roll >= rate) & (roll < 1.1 * rate)
    out[mixed] = np.frombuffer(AMBIGUOUS, dtype=np.uint8)[rng.integers(len(AMBIGUOUS), size=int(mixed.sum()))]
    return out


def pam_sites(rng: np.random.Generator, n: int) -> np.ndarray:
    """NGG: a random base, then GG."""
    return np.concatenate([LETTERS[DNA][rng.integers(4, size=(n, 1))], np.full((n, 2), ord("G"), np.uint8)], axis=1)


def strings(codes: np.ndarray) -> list[str]:
    return [bytes(row[row > 0]).decode("ascii") for row in codes]


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def number(value: float) -> str:
    return f"{value:.6f}"


def random_motif(rng: np.random.Generator, length: int, alphabet: bytes = RNA) -> bytes:
    return bytes(rng.choice(LETTERS[alphabet], size=length))


# -- the datasets: (header, rows) for n sequences ---------------------------------------------------------------
def _apa(params: np.random.Generator, rng: np.random.Generator, n: int) -> tuple[list[str], Rows]:
    """3' UTR variants of 186 nt; the proximal poly(A) signal AAUAAA raises the proximal share, a distal
    one lowers it, U-rich and GC-poor sequences favour it. Label: the proximal isoform proportion."""
    codes = draw(rng, compositions(rng, n, 12.0), 186, RNA)
    for low, high in ((20, 80), (110, 170)):
        for copies in (1, 2):
            plant(rng, codes, np.flatnonzero(rng.random(n) < 0.3 / copies), b"AAUAAA", low, high)
    proximal, distal = count(codes[:, :95], b"AAUAAA"), count(codes[:, 95:], b"AAUAAA")
    logit = (
        -0.2 + 1.4 * proximal - 0.9 * distal + 9.0 * (fraction(codes, b"U") - 0.25)
        - 6.0 * (fraction(codes, b"GC") - 0.5) + rng.normal(0.0, 0.45, n)
    )  # fmt: skip
    share = sigmoid(logit)
    # BEACON's Isoform files begin with pandas' unnamed index column
    rows = [[str(i), s, number(v)] for i, (s, v) in enumerate(zip(strings(blur(rng, codes, 0.002)), share))]
    return ["", "seq", "proximal_isoform_proportion"], rows


def _cri_off(params: np.random.Generator, rng: np.random.Generator, n: int) -> tuple[list[str], Rows]:
    """A 20 nt guide + NGG and a target that differs from it at 0-6 positions; a mismatch costs more
    the nearer it is to the PAM. GC-rich guides cleave more. Label: the cleavage score."""
    guide = draw(rng, compositions(rng, n, 10.0), 20, DNA)
    target = guide.copy()
    weight = 0.15 + 0.6 * (np.arange(20) / 19.0) ** 2
    penalty = np.zeros(n)
    for row, k in enumerate(np.minimum(rng.poisson(2.0, n), 6)):
        where = rng.choice(20, size=k, replace=False)
        other = (np.searchsorted(LETTERS[DNA], guide[row, where]) + rng.integers(1, 4, size=k)) % 4
        target[row, where] = LETTERS[DNA][other]
        penalty[row] = weight[where].sum()
    pam = pam_sites(rng, n)
    score = np.exp(-1.5 * penalty) + 0.8 * (fraction(guide, b"GC") - 0.5) + rng.normal(0.0, 0.08, n)
    sgrna, dna = strings(np.concatenate([guide, pam], axis=1)), strings(np.concatenate([target, pam], axis=1))
    return ["sgrna", "target", "label"], [[a, b, number(v)] for a, b, v in zip(sgrna, dna, score)]


def _modif(params: np.random.Generator, rng: np.random.Generator, n: int) -> tuple[list[str], Rows]:
    """101 nt around a candidate site (position 50). Each of the 12 modifications has its own centre base,
    a 5 nt context motif around it and a flank composition; 30% of the sites carry none. Label: 12 flags
    (the site's modification, plus a rare second one)."""
    centre_bases = b"ACGUACUAAGUA"  # hAm, hCm, hGm, hUm, hm1A, hm5C, hm5U, hm6A, hm6Am, hm7G, hPsi, Atol
    motifs = [random_motif(params, 2) + bytes([base]) + random_motif(params, 2) for base in centre_bases]
    flanks = params.dirichlet(np.full(4, 4.0), size=13)  # 12 modifications, then none
    kind = np.where(rng.random(n) < 0.3, 12, rng.integers(0, 12, size=n))
    codes = np.zeros((n, 101), dtype=np.uint8)
    for k in range(13):
        rows = np.flatnonzero(kind == k)
        codes[rows] = draw(rng, compositions(rng, len(rows), 40.0, flanks[k]), 101, RNA)
        if k < 12:
            codes[rows, 48:53] = np.frombuffer(motifs[k], dtype=np.uint8)
    labels = (rng.random((n, 12)) < 0.02).astype(int)
    has = kind < 12
    labels[np.flatnonzero(has), kind[has]] = 1
    rows_out = [
        [s, "[" + ", ".join(map(str, flags)) + "]"] for s, flags in zip(strings(blur(rng, codes, 0.002)), labels)
    ]
    return ["sequence", "label"], rows_out


def _cri_on(params: np.random.Generator, rng: np.random.Generator, n: int) -> tuple[list[str], Rows]:
    """A 20 nt guide + NGG. Efficiency: a position weight matrix (G next to the PAM helps, T near it hurts),
    more G and less T overall, a GC optimum near 55%. Label: the efficiency in (0, 1)."""
    guide = draw(rng, compositions(rng, n, 10.0), 20, DNA)
    pwm = params.normal(0.0, 0.35, size=(20, 4))
    pwm[19, DNA.index(b"G")] += 0.8
    pwm[16:20, DNA.index(b"T")] -= 0.5
    index = np.searchsorted(LETTERS[DNA], guide)
    positional = pwm[np.arange(20)[None, :], index].sum(axis=1)
    gc = fraction(guide, b"GC")
    logit = (
        positional + 3.0 * (fraction(guide, b"G") - 0.25) - 3.0 * (fraction(guide, b"T") - 0.25)
        - 8.0 * (gc - 0.55) ** 2 + rng.normal(0.0, 0.35, n)
    )  # fmt: skip
    pam = pam_sites(rng, n)
    sequences = strings(np.concatenate([guide, pam], axis=1))
    return ["seq", "label"], [[s, number(v)] for s, v in zip(sequences, sigmoid(logit))]


def _prs(params: np.random.Generator, rng: np.random.Generator, n: int) -> tuple[list[str], Rows]:
    """148 nt toehold switches in three regions with their own composition: toehold (0-30), stem (30-90)
    and ribosome binding region (90-148), where AGGAGA may sit. ON rises with an A-rich binding region
    and the motif and falls with a GC-rich toehold; OFF falls with a GC-rich stem. Labels: ON, OFF, ON-OFF."""
    regions = [(0, 30), (30, 90), (90, 148)]
    codes = np.concatenate([draw(rng, compositions(rng, n, 8.0), high - low, RNA) for low, high in regions], axis=1)
    plant(rng, codes, np.flatnonzero(rng.random(n) < 0.5), b"AGGAGA", 95, 140)
    rbs = count(codes[:, 90:], b"AGGAGA")
    on = sigmoid(
        -0.5 + 5.0 * (fraction(codes[:, 90:], b"A") - 0.25) + 1.0 * rbs
        - 3.0 * (fraction(codes[:, :30], b"GC") - 0.5) + rng.normal(0.0, 0.4, n)
    )  # fmt: skip
    off = sigmoid(-1.0 - 5.0 * (fraction(codes[:, 30:90], b"GC") - 0.5) + 0.5 * rbs + rng.normal(0.0, 0.4, n))
    on_off = on - off + rng.normal(0.0, 0.03, n)
    rows = [[s, number(a), number(b), number(c)] for s, a, b, c in zip(strings(codes), on, off, on_off)]
    return ["sequence", "ON", "OFF", "ON_OFF"], rows


def _mrl(params: np.random.Generator, rng: np.random.Generator, n: int) -> tuple[list[str], Rows]:
    """5' UTRs of 25-100 nt. Upstream AUGs lower the mean ribosome load, AU-rich (less structured) and
    longer UTRs raise it. Label: the mean ribosome loading."""
    lengths = rng.integers(25, 101, size=n)
    codes = draw(rng, compositions(rng, n, 10.0), 100, RNA)
    for copies in (1, 2):
        plant(rng, codes, np.flatnonzero(rng.random(n) < 0.35 / copies), b"AUG", 0, 25)
    codes = cut(codes, lengths)
    load = (
        4.0 + 6.0 * (fraction(codes, b"AU") - 0.5) - 0.9 * count(codes, b"AUG") + 0.015 * (lengths - 60)
        + rng.normal(0.0, 0.45, n)
    )  # fmt: skip
    return ["seq", "label"], [[s, number(v)] for s, v in zip(strings(blur(rng, codes, 0.002)), load)]


def _ncrna(params: np.random.Generator, rng: np.random.Generator, n: int) -> tuple[list[str], Rows]:
    """13 families of 30-100 nt, unequally common, each with its own length, composition and an 8 nt motif
    (present once or twice). Label: the family's index."""
    weights = params.uniform(0.5, 1.5, size=13)
    mean_length = params.uniform(45.0, 90.0, size=13)
    family_composition = params.dirichlet(np.full(4, 5.0), size=13)
    motifs = [random_motif(params, 8) for _ in range(13)]
    family = rng.choice(13, size=n, p=weights / weights.sum())
    lengths = np.clip(np.round(rng.normal(mean_length[family], 6.0)), 30, 100).astype(int)
    codes = np.zeros((n, 100), dtype=np.uint8)
    for k in range(13):
        rows = np.flatnonzero(family == k)
        codes[rows] = draw(rng, compositions(rng, len(rows), 60.0, family_composition[k]), 100, RNA)
        for copies in (1, 2):
            chosen = rows[rng.random(len(rows)) < 0.9 / copies]
            plant(rng, codes, chosen, motifs[k], 0, 30)
    codes = cut(codes, lengths)
    return ["sequence", "label"], [[s, str(f)] for s, f in zip(strings(blur(rng, codes, 0.002)), family)]


GENERATORS: dict[str, Callable[[np.random.Generator, np.random.Generator, int], tuple[list[str], Rows]]] = {
    "Isoform": _apa,
    "CRISPROffTarget": _cri_off,
    "Modification": _modif,
    "CRISPROnTarget": _cri_on,
    "ProgrammableRNASwitches": _prs,
    "MeanRibosomeLoading": _mrl,
    "NoncodingRNAFamily": _ncrna,
}


StreamSeeds = Callable[[str, str], int]  # (BEACON folder, "params" or a split) -> that stream's seed


def simulate(
    seed: int = 0, size: str = "default", streams: StreamSeeds | None = None
) -> dict[str, tuple[list[str], dict[str, Rows]]]:
    """BEACON folder name -> (CSV header, rows per split). The same arguments give the same rows.

    `streams` gives each dataset's seeds: one for its parameters (the task itself, the same for
    every size) and one per split, each split's rows drawn from its own stream (the station's
    keyed seeds: dataset.py). Without it, the public draw: `seed` alone picks the streams, and one
    stream of rows is cut into the splits."""
    if size not in SIZES:
        raise ValueError(f"rna: size must be one of {sorted(SIZES)}, got {size!r}")
    counts = SIZES[size]
    out = {}
    for index, (folder, generate) in enumerate(GENERATORS.items()):
        if streams is None:
            params = np.random.default_rng([seed, index, 1])  # the task itself: the same for every size
            rows_rng = np.random.default_rng([seed, index, 2])
            header, rows = generate(params, rows_rng, sum(counts))
            bounds = np.cumsum((0, *counts))
            out[folder] = (header, {split: rows[bounds[i] : bounds[i + 1]] for i, split in enumerate(SPLITS)})
            continue
        splits = {}
        for split, n in zip(SPLITS, counts):  # the parameters' stream is read afresh: one task for every split
            params, rows_rng = (np.random.default_rng(streams(folder, name)) for name in ("params", split))
            header, splits[split] = generate(params, rows_rng, n)
        out[folder] = (header, splits)
    return out


def write_beacon_folder(root: Path, seed: int = 0, size: str = "default", streams: StreamSeeds | None = None) -> Path:
    """The sample as BEACON lays it out: root/<BEACON folder>/{train,val,test}.csv, with a header row."""
    for folder, (header, splits) in simulate(seed, size, streams).items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        for split, rows in splits.items():
            with open(root / folder / f"{split}.csv", "w", newline="", encoding="ascii") as handle:
                writer = csv.writer(handle, lineterminator="\n")
                writer.writerow(header)
                writer.writerows(rows)
    return root
