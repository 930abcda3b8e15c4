"""Three weights in [0, 1] whose sum is as large as it may be (at most 1)."""


# EVOLVE-BLOCK-START
def weights():
    return [0.25, 0.25, 0.25]


# EVOLVE-BLOCK-END


def run_experiment():
    return {"weights": [float(w) for w in weights()]}
