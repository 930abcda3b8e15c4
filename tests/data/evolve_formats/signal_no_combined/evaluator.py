"""Signal smoothing, in the shape of OpenEvolve's signal_processing example: its metrics have no
combined_score; overall_score is the one to rank by, output_length a raw count beside it."""

import importlib.util
import math
import random


def _signals():
    rng = random.Random(7)
    clean = [math.sin(i / 6.0) for i in range(120)]
    noisy = [c + rng.gauss(0.0, 0.3) for c in clean]
    return clean, noisy


def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("program", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    clean, noisy = _signals()
    out = [float(v) for v in module.run_signal_processing(noisy)]
    if len(out) != len(clean) or not all(math.isfinite(v) for v in out):
        return {"overall_score": 0.0, "output_length": float(len(out)), "error": "wrong output length"}
    mse = sum((a - b) ** 2 for a, b in zip(out, clean)) / len(clean)
    return {"overall_score": 1.0 / (1.0 + 10.0 * mse), "mse": mse, "output_length": float(len(out))}
