"""Circle packing (four circles), in the shape of OpenEvolve's circle_packing example: a quick
validity check as stage 1, the full score as stage 2 and as evaluate; combined_score is the sum of radii over
the best known value for four circles (1.0, four circles of radius 0.25)."""

import importlib.util
import math

N, BEST = 4, 1.0


def _run(program_path):
    spec = importlib.util.spec_from_file_location("program", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    centers, radii, reported = module.run_packing()
    return [(float(x), float(y)) for x, y in centers], [float(r) for r in radii], float(reported)


def _valid(centers, radii):
    if len(centers) != N or len(radii) != N:
        return False
    for (x, y), r in zip(centers, radii):
        if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(r)) or r < 0:
            return False
        if x - r < -1e-9 or x + r > 1 + 1e-9 or y - r < -1e-9 or y + r > 1 + 1e-9:
            return False
    for i in range(N):
        for j in range(i + 1, N):
            (xi, yi), (xj, yj) = centers[i], centers[j]
            if math.hypot(xi - xj, yi - yj) < radii[i] + radii[j] - 1e-9:
                return False
    return True


def evaluate_stage1(program_path):
    centers, radii, _ = _run(program_path)
    valid = _valid(centers, radii)
    return {"validity": 1.0 if valid else 0.0, "combined_score": sum(radii) / BEST if valid else 0.0}


def evaluate(program_path):
    centers, radii, reported = _run(program_path)
    valid = _valid(centers, radii)
    total = sum(radii) if valid else 0.0
    return {"validity": 1.0 if valid else 0.0, "sum_radii": total, "target_ratio": total / BEST,
            "combined_score": total / BEST}


def evaluate_stage2(program_path):
    return evaluate(program_path)
