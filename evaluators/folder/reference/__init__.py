"""The reference station's own task folders (research/research_task.md or research_tasks.yaml, an
evaluator subclassing its ResearchTaskEvaluator): read here (folder.py), judged in the scorer's
sandbox (reference_scorer.py) with a stand-in for the reference's `station` package (standin/)."""
