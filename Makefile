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

# Three workers on two cores: many tests wait on subprocesses, sandboxes and servers. --dist loadfile
# keeps a module's tests (and its module fixtures) in one worker.
test: setup check
	.venv/bin/python -m pytest -q -n 3 --dist loadfile

# The code checks (docs/extending.md): lint, formatting, types and the layers.
check: setup
	.venv/bin/ruff check station rooms evaluators tests scripts
	.venv/bin/ruff format --check station rooms evaluators
	.venv/bin/mypy
	.venv/bin/lint-imports --no-cache

bench: setup
	.venv/bin/python scripts/bench_engine.py
	.venv/bin/python scripts/bench_eval.py
	.venv/bin/python scripts/bench_turns.py
	.venv/bin/python scripts/bench_scale.py
	.venv/bin/python scripts/bench_scrna.py
	.venv/bin/python scripts/bench_jax.py
	.venv/bin/python scripts/bench_web.py
