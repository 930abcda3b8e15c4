# EVOLVE-BLOCK-START
"""Find the global minimum of a bumpy function of two variables: plain random search."""
import numpy as np


def search_algorithm(iterations=1000, bounds=(-5, 5)):
    best_x = np.random.uniform(bounds[0], bounds[1])
    best_y = np.random.uniform(bounds[0], bounds[1])
    best_value = evaluate_function(best_x, best_y)
    for _ in range(iterations):
        x = np.random.uniform(bounds[0], bounds[1])
        y = np.random.uniform(bounds[0], bounds[1])
        value = evaluate_function(x, y)
        if value < best_value:
            best_x, best_y, best_value = x, y, value
    return best_x, best_y, best_value


# EVOLVE-BLOCK-END


# The function and the entry point stay fixed.
def evaluate_function(x, y):
    return np.sin(x) * np.cos(y) + np.sin(x * y) + (x**2 + y**2) / 20


def run_search():
    return search_algorithm()


if __name__ == "__main__":
    x, y, value = run_search()
    print(f"minimum found at ({x}, {y}) with value {value}")
