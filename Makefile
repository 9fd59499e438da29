# Every target sets up .venv first (scripts/setup.sh; a no-op once done).
PY := .venv/bin/python

.PHONY: setup run test book bench lab clean

setup:
	@sh scripts/setup.sh

run: setup  ## the main job: a real 4-rank process group checked from the terminal
	$(PY) -m ddplab check --world-size 4

test: setup  ## lint, the library's tests, then every lab under nbval
	.venv/bin/ruff check src tests benchmarks scripts book/_ext
	$(PY) -m pytest

book: setup  ## the book, every page executed by real runs; warnings are errors
	.venv/bin/jupyter-book build . --builder html -W -n --keep-going
	@echo "The book is in _build/html: open _build/html/index.html"

bench: setup  ## latency of the warm pool against a fresh interpreter and cold spawn
	$(PY) benchmarks/pool_latency.py
	$(PY) benchmarks/time_cost.py

clean:
	rm -rf .venv _build .pytest_cache

lab: setup  ## JupyterLab on the labs
	.venv/bin/jupyter lab labs/
