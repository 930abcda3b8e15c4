# title: Ruler and multiples
# tags: baseline, ruler
# abstract: The marks 0..m-1 and the multiples of m up to m*m: every number up to m*m is a
#   difference, with 2m marks: |B|^2 / n = 4. The knob is m.

M = 40


def construct_difference_basis():
    marks = set(range(M)) | {M * j for j in range(1, M + 1)}
    return {"n": M * M, "basis": sorted(marks)}
