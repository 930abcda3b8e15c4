# The two commands of the README. Both run scripts/setup first (idempotent, fast when done).
DIR ?= runs/demo
TICKS ?= 100

.PHONY: setup run test check bench

setup:
	@scripts/setup

run: setup
	.venv/bin/station run configs/demo.yaml --dir $(DIR) --until-tick $(TICKS)
	@echo
	@echo "Read it:  .venv/bin/station status $(DIR)"
	@echo "          .venv/bin/station agents $(DIR) --all"
	@echo "          .venv/bin/station dialogue $(DIR) Guest_1"

# Python may keep the compiled form of our modules (__pycache__, git-ignored) even where the
# environment says not to: without it every test's subprocess and every collection recompiles
# station/, rooms/, evaluators/ and the test modules (collection alone: 32 s against 8 s).
unexport PYTHONDONTWRITEBYTECODE

# Three workers on two cores, each taking whole test modules, heaviest first: a fifth of the
# tests' time is waiting (Ray and sandboxes starting, limits under test), which the third fills
# (737 s -> 655 s here). The tests that start Ray run one at a time in one worker
# (tests/conftest.py says which and why).
test: setup check
	.venv/bin/python -m pytest -q -n 3 --durations=30

# The code checks (docs/extending.md): lint, formatting, types and the layers.
check: setup
	.venv/bin/ruff check station rooms evaluators tests scripts
	.venv/bin/ruff format --check station rooms evaluators
	.venv/bin/mypy -n auto
	.venv/bin/lint-imports --no-cache

bench: setup
	.venv/bin/python scripts/bench_engine.py
	.venv/bin/python scripts/bench_eval.py
	.venv/bin/python scripts/bench_turns.py
	.venv/bin/python scripts/bench_scale.py
	.venv/bin/python scripts/bench_scrna.py
	.venv/bin/python scripts/bench_jax.py
	.venv/bin/python scripts/bench_web.py
