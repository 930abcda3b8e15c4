"""Evaluator of the Weighted Labels test task (paper-era layout, written for this station's tests)."""

import json
import os
from typing import Optional, Tuple

import numpy as np

from station import constants, file_io_utils
from station.eval_research.base_evaluator import ResearchTaskEvaluator


class Task1Evaluator(ResearchTaskEvaluator):
    def __init__(self):
        super().__init__("1")

    def get_expected_function_name(self) -> str:
        return "make_labels"

    def get_task_description(self) -> str:
        return "Weighted labels"

    def evaluate_submission(self, result, eval_id: str = None, author: str = None):
        try:
            score, kinds = self._check(result)
        except AssertionError as err:
            return False, 0.0, f"Verification failed: {err}"
        kept = os.path.join(
            constants.BASE_STATION_DATA_PATH, constants.ROOMS_DIR_NAME, constants.SHORT_ROOM_NAME_RESEARCH,
            constants.RESEARCH_INTERNAL_DIR, "labels",
        )
        file_io_utils.ensure_dir_exists(kept)
        file_io_utils.save_text(str(score), os.path.join(kept, f"{eval_id}.txt"))
        return True, score, f"Valid labels ({kinds}); timeout setting {constants.RESEARCH_EVAL_TIMEOUT}"

    def _check(self, result) -> Tuple[float, str]:
        assert isinstance(result, tuple) and len(result) == 3, f"expected a 3-tuple, got {type(result).__name__}"
        labels, weights, meta = result
        assert isinstance(labels, np.ndarray) and labels.dtype == np.int8, "labels must be an int8 array"
        assert isinstance(weights, list) and all(isinstance(w, float) for w in weights), "weights: a list of floats"
        assert isinstance(meta, str) and "name" in json.loads(meta), "meta: a JSON string with a name"
        assert np.all((labels >= 1) & (labels <= 100)), "labels must lie in 1..100"
        assert all(0.0 <= w <= 1.0 for w in weights), "weights must lie in [0, 1]"
        kinds = f"{type(result).__name__} of {labels.dtype} array, {type(weights).__name__}, {type(meta).__name__}"
        return float(int(labels.astype(np.int64).sum()) * sum(weights)), kinds

    def validate_submission_code(self, content: str, author: str, agent_module) -> Tuple[bool, Optional[str]]:
        if "forbidden_marker" in content:
            return False, "the source holds the forbidden marker"
        return True, None
