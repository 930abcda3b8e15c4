# EVOLVE-BLOCK-START
"""Smooth a noisy signal: a moving average of width 3."""


def filter_signal(samples):
    out = []
    for i in range(len(samples)):
        window = samples[max(0, i - 1) : i + 2]
        out.append(sum(window) / len(window))
    return out


# EVOLVE-BLOCK-END


def run_signal_processing(samples):
    return filter_signal(samples)
