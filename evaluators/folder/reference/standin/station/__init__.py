"""A stand-in for the reference station's package, as far as its task evaluators import it:
`station.constants`, `station.file_io_utils` and `station.eval_research.base_evaluator`. It exists
only inside the scorer's sandbox of a reference-format task."""
