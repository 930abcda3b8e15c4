# title: Ring and centre
# tags: baseline, ring
# abstract: Twelve points on an ellipse and one near the centre; the axes, the turn and the centre
#   point are the knobs.
import math

POINTS = 12
WIDTH, HEIGHT, TURN = 1.0, 0.8, 0.1
CENTRE = (0.05, 0.02)


def construct_points():
    ring = [
        [WIDTH * math.cos(2 * math.pi * k / POINTS + TURN), HEIGHT * math.sin(2 * math.pi * k / POINTS + TURN)]
        for k in range(POINTS)
    ]
    return [*ring, list(CENTRE)]
