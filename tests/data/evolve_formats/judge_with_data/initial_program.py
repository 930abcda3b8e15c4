# EVOLVE-BLOCK-START
"""Find two positions whose numbers add up to the target."""


def solve(numbers, target):
    for i in range(len(numbers) - 1):  # neighbours only: fast, but misses most pairs
        if numbers[i] + numbers[i + 1] == target:
            return i, i + 1
    return None


# EVOLVE-BLOCK-END
