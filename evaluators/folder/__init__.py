"""Research tasks given as folders (docs/tasks.md): a statement, a trusted scorer, data and baselines."""
