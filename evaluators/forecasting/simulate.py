"""Seeded simulator of whole-brain activity for the forecasting task (after ZAPBench: calcium traces
of every neuron of a larval zebrafish, recorded through a sequence of experimental conditions).

Generative model
----------------
One continuous recording of `n_conditions` blocks of `frames_per_condition` frames each; in block
c the animal sees stimulus c. Per frame t, for N neurons:

    drive[t] = b + b_c + S_c(t) + L z[t]                     (external input)
    x[t+1]   = (1 - a) x[t] + a tanh(W x[t] + drive[t]) + s eps[t]
    r[t]     = softplus(g (x[t] + o[t]) - theta)            (firing rate)
    c[t]     = d c[t-1] + r[t]                              (calcium, d = exp(-1 / tau_ca))
    F[t]     = c[t] / (c[t] + K) + noise                    (indicator saturation, imaging noise)

* Recurrence: W is sparse (10% of pairs, Gaussian weights) plus a rank-2 part, rescaled to a
  spectral radius of 0.95, just below the edge of chaos, with leak a = 0.3: slow, decaying
  population modes that the process noise eps keeps excited.
* Conditions: S_c drives a random 15% of the neurons (mostly excitatory weights) with a profile of
  the condition's kind: periodic flashes, a drifting (sinusoidal) grating, slow ramps, darkness
  (no stimulus), randomly timed dots, and looming (a wave travelling through the driven neurons).
  b_c is a small condition-wide shift of baselines.
* Slow state: z is a 3-dimensional Ornstein-Uhlenbeck process with time constants of 200-600
  frames, projected onto all neurons by a random loading L (like arousal or drifting state).
* Oscillations: o[t] holds three rhythms (periods of about 5-10, 12-20 and 25-45 frames), each on a
  random 30% of the neurons with its own amplitude and phase, with a slowly diffusing phase.
* Observation: per-neuron calcium decay (tau_ca of 1.5-4 frames), saturation, Gaussian noise of
  per-neuron size, then per-neuron normalisation to the 1st..99th percentile of the training
  frames, so most values lie in [0, 1] (like ZAPBench's normalised traces).

Split (like ZAPBench's): each condition is one contiguous block; of each of the first K-1
conditions the first 70% of the frames go to train, the next 15% to val and the last 15% to test;
the last condition is held out whole and goes to test only.
"""

from __future__ import annotations

import numpy as np

SIZES = {
    "default": {"n_neurons": 512, "frames_per_condition": 1000},
    "small": {"n_neurons": 64, "frames_per_condition": 300},
}
N_CONDITIONS = 6
KINDS = ("flashes", "drifting", "ramps", "dark", "random_dots", "looming")
# train, val, test of each condition that is not held out: our default, and ZAPBench's official split
SPLIT_FRACTIONS = {"default": (0.70, 0.15, 0.15), "official": (0.70, 0.10, 0.20)}
SPLITS = ("train", "val", "test")

LEAK, RADIUS, PROCESS_NOISE, BURN_IN = 0.3, 0.95, 0.15, 300


def simulate(
    seed: int = 0,
    n_neurons: int = 512,
    n_conditions: int = N_CONDITIONS,
    frames_per_condition: int = 1000,
    split: str = "default",
) -> dict[str, np.ndarray]:
    """The whole recording (`data` (T, N) float32, `condition_labels` (T,) int64) and its split:
    `{train,val,test}_data` and `{train,val,test}_condition_labels`. The last condition is held out.
    The same arguments give the same arrays, bit for bit."""
    if n_neurons < 8 or n_conditions < 2 or frames_per_condition < 100:
        raise ValueError("need at least 8 neurons, 2 conditions and 100 frames per condition")
    rng = np.random.default_rng(seed)
    n, frames = n_neurons, n_conditions * frames_per_condition
    labels = np.repeat(np.arange(n_conditions, dtype=np.int64), frames_per_condition)

    weights = _connectivity(rng, n)
    drive = _condition_drive(rng, n, n_conditions, frames_per_condition) + _slow_drive(rng, n, frames)
    rhythm = _oscillations(rng, n, frames)
    activity = _network(rng, weights, drive)
    fluorescence = _observe(rng, activity + rhythm)

    masks = split_masks(labels, held_out=(n_conditions - 1,), split=split)
    low, high = np.percentile(fluorescence[masks["train"]], [1, 99], axis=0)
    data = ((fluorescence - low) / np.maximum(high - low, 1e-6)).astype(np.float32)
    out = {"data": data, "condition_labels": labels}
    for name, mask in masks.items():
        out[f"{name}_data"], out[f"{name}_condition_labels"] = data[mask], labels[mask]
    return out


def split_masks(labels: np.ndarray, held_out: tuple[int, ...] = (), split: str = "default") -> dict[str, np.ndarray]:
    """Boolean frame masks of train, val and test: each condition (one contiguous block) is cut in
    time order by SPLIT_FRACTIONS[split] (70/15/15, or ZAPBench's 70/10/20); the conditions in
    `held_out` go to test whole."""
    if split not in SPLIT_FRACTIONS:
        raise ValueError(f"split must be one of {sorted(SPLIT_FRACTIONS)}, got {split!r}")
    fractions = SPLIT_FRACTIONS[split]
    masks = {split: np.zeros(len(labels), dtype=bool) for split in SPLITS}
    for condition in np.unique(labels):
        where = np.flatnonzero(labels == condition)
        if where[-1] - where[0] + 1 != len(where):
            raise ValueError(f"condition {condition} is not one contiguous block of frames")
        if condition in held_out:
            masks["test"][where] = True
            continue
        n_train = int(round(fractions[0] * len(where)))
        n_val = int(round(fractions[1] * len(where)))
        masks["train"][where[:n_train]] = True
        masks["val"][where[n_train : n_train + n_val]] = True
        masks["test"][where[n_train + n_val :]] = True
    return masks


def _connectivity(rng: np.random.Generator, n: int) -> np.ndarray:
    density = 0.1
    sparse = rng.normal(size=(n, n)) * (rng.random((n, n)) < density) / np.sqrt(density * n)
    np.fill_diagonal(sparse, 0.0)
    left, right = rng.normal(size=(n, 2)), rng.normal(size=(n, 2))
    weights = sparse + 1.5 * left @ right.T / n  # shared population modes
    return weights * (RADIUS / np.abs(np.linalg.eigvals(weights)).max())


def _condition_drive(rng: np.random.Generator, n: int, n_conditions: int, length: int) -> np.ndarray:
    """External input of every frame: a baseline, a condition-wide shift and the stimulus."""
    baseline = rng.normal(0.0, 0.3, size=n)
    blocks = []
    for condition in range(n_conditions):
        kind = KINDS[condition % len(KINDS)]
        driven = rng.random(n) < 0.15
        gain = np.where(rng.random(n) < 0.8, 1.0, -1.0) * rng.uniform(0.8, 2.0, size=n) * driven
        profile = _profile(rng, kind, length, n, driven)  # (length, 1) or (length, n)
        shift = rng.normal(0.0, 0.15, size=n)
        blocks.append(baseline + shift + profile * gain)
    return np.concatenate(blocks)


def _profile(rng: np.random.Generator, kind: str, length: int, n: int, driven: np.ndarray) -> np.ndarray:
    t = np.arange(length, dtype=np.float64)[:, None]
    if kind == "flashes":  # 3-frame flashes at a fixed period
        cycle = rng.integers(40, 71)
        return (((t + rng.integers(cycle)) % cycle) < 3).astype(float)
    if kind == "drifting":
        period = rng.uniform(60, 120)
        return 0.5 * (1 + np.sin(2 * np.pi * t / period + rng.uniform(0, 2 * np.pi)))
    if kind == "ramps":  # slow rise, sudden reset
        period = rng.uniform(120, 200)
        return ((t + rng.uniform(0, period)) % period) / period
    if kind == "random_dots":  # unpredictable onsets, each with an exponential after-response
        events = (rng.random(length) < 1 / 20).astype(float)
        kernel = np.exp(-np.arange(15) / 3.0)
        return np.convolve(events, kernel)[:length, None]
    if kind == "looming":  # a pulse that sweeps through the driven neurons in a fixed order
        period = rng.uniform(50, 80)
        delay = np.zeros(n)
        delay[driven] = np.linspace(0, period / 2, int(driven.sum()))
        phase = (t - delay[None, :]) % period
        return np.exp(-phase / 6.0) * (phase < period / 2)
    return np.zeros((length, 1))  # dark: no stimulus


def _slow_drive(rng: np.random.Generator, n: int, frames: int) -> np.ndarray:
    tau = rng.uniform(200, 600, size=3)
    z = np.zeros((frames, 3))
    kicks = rng.normal(size=(frames, 3)) * np.sqrt(2.0 / tau)
    for t in range(1, frames):
        z[t] = z[t - 1] * (1 - 1 / tau) + kicks[t]
    return z @ rng.normal(0.0, 0.4, size=(3, n))


def _oscillations(rng: np.random.Generator, n: int, frames: int) -> np.ndarray:
    out = np.zeros((frames, n))
    for low, high in ((5, 10), (12, 20), (25, 45)):
        step = 2 * np.pi / rng.uniform(low, high)
        phase = np.cumsum(step + rng.normal(0.0, 0.08, size=frames))  # slow phase diffusion
        loading = rng.uniform(0.2, 0.6, size=n) * (rng.random(n) < 0.3)
        offset = rng.uniform(0, 2 * np.pi, size=n)
        out += loading * np.sin(phase[:, None] + offset)
    return out


def _network(rng: np.random.Generator, weights: np.ndarray, drive: np.ndarray) -> np.ndarray:
    frames, n = drive.shape
    noise = rng.normal(0.0, PROCESS_NOISE, size=(BURN_IN + frames, n))
    x = np.zeros(n)
    out = np.empty((frames, n))
    for t in range(BURN_IN + frames):  # the burn-in forgets the all-zero start
        x = (1 - LEAK) * x + LEAK * np.tanh(weights @ x + drive[max(t - BURN_IN, 0)]) + noise[t]
        if t >= BURN_IN:
            out[t - BURN_IN] = x
    return out


def _observe(rng: np.random.Generator, activity: np.ndarray) -> np.ndarray:
    frames, n = activity.shape
    gain, threshold = rng.uniform(1.5, 3.0, size=n), rng.normal(1.0, 0.5, size=n)
    rate = np.logaddexp(0.0, gain * activity - threshold)  # softplus
    decay = np.exp(-1.0 / rng.uniform(1.5, 4.0, size=n))
    calcium = np.empty_like(rate)
    level = rate[0] / (1 - decay)
    for t in range(frames):
        level = decay * level + rate[t]
        calcium[t] = level
    half = np.median(calcium, axis=0) * rng.uniform(1.0, 3.0, size=n)  # saturation constant K
    signal = calcium / (calcium + half)
    noise_sd = signal.std(axis=0) * rng.uniform(0.1, 0.35, size=n)
    return signal + rng.normal(size=(frames, n)) * noise_sd
