"""Single-cell RNA-seq data for the batch-integration task: a seeded simulator and a loader."""
