"""Evaluator of the Sparse Ruler test task (newer layout, written for this station's tests)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from station import constants
from station.eval_research.base_evaluator import ResearchTaskEvaluator, SeedBatchEvaluation

LENGTH = 10
FUNCTION = "construct_ruler"


class Task1Evaluator(ResearchTaskEvaluator):
    def __init__(self):
        super().__init__()

    def get_expected_function_name(self) -> str:
        return FUNCTION

    def get_task_description(self) -> str:
        return "Sparse ruler of length 10"

    def get_secondary_metrics_format(self) -> Optional[Dict[str, Optional[str]]]:
        return {"Marks": "d", "Coverage": ".3f", "Note": None}

    def evaluate_submission(self, result, eval_id: str = None, author: str = None):
        try:
            marks = self._marks(result)
        except AssertionError as err:
            return False, constants.RESEARCH_SCORE_NA, {"Message": f"Verification failed: {err}"}, (float("-inf"),)
        score = float(len(marks))
        details = {"Message": f"Valid ruler with {len(marks)} marks.", "Marks": len(marks), "Coverage": 1.0,
                   "Note": "lower is better"}
        return True, score, details, (-score,)

    def evaluate_seed_batch(self, result, eval_id: str = None, author: str = None) -> SeedBatchEvaluation:
        raise NotImplementedError

    def _marks(self, result: Any) -> set:
        assert isinstance(result, list) and all(isinstance(m, int) for m in result), "return a list of integers"
        marks = set(result)
        assert {0, LENGTH} <= marks and all(0 <= m <= LENGTH for m in marks), f"marks must lie in 0..{LENGTH}"
        missing = sorted(set(range(1, LENGTH + 1)) - {a - b for a in marks for b in marks})
        assert not missing, f"distances not measured: {missing}"
        return marks
