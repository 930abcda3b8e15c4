# EVOLVE-BLOCK-START
"""Sort with as few comparisons as you can."""


def sort_numbers(items):
    items = list(items)
    for end in range(len(items) - 1, 0, -1):  # bubble sort
        for i in range(end):
            if items[i + 1] < items[i]:
                items[i], items[i + 1] = items[i + 1], items[i]
    return items


# EVOLVE-BLOCK-END
