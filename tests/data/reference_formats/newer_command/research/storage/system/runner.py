"""Runs the submission (run.py in the working directory) and prints its answer."""

import run

print(f"RESULT: {int(run.answer())}")
