"""Whole-brain activity forecasting (ZAPBench-like): a seeded simulator, the dataset on disk and its reference scores."""
