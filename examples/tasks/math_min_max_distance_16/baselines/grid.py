# title: Stretched grid
# tags: baseline, grid
# abstract: A 4 x 4 grid whose rows are further apart than its columns, every other row shifted: the
#   row gap and the shift are the knobs (a square grid, gap 1 and no shift, gives 18).

ROW_GAP = 1.4
SHIFT = 0.0


def construct_points():
    return [[x + SHIFT * (row % 2), row * ROW_GAP] for row in range(4) for x in range(4)]
