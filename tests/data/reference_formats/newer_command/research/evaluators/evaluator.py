"""Evaluator of the Printed Answer test task (newer layout, command mode, written for this station's tests)."""

import re

from station import constants
from station.eval_research.base_evaluator import ResearchTaskEvaluator


class Task1Evaluator(ResearchTaskEvaluator):
    def get_execution_mode(self) -> str:
        return "command"

    def get_submission_filename(self) -> str:
        return "run.py"

    def get_execution_command(self) -> str:
        return "python storage/system/runner.py"

    def get_expected_function_name(self) -> str:
        return "unused_in_command_mode"

    def get_task_description(self) -> str:
        return "Printed answer"

    def evaluate_submission(self, result, eval_id=None, author=None):
        found = re.findall(r"^RESULT: (-?\d+)$", str(result), re.MULTILINE)
        if not found:
            return False, constants.RESEARCH_SCORE_NA, "No RESULT line in the output"
        return True, float(found[-1]), f"The command printed {found[-1]}"
