# Every target sets up .venv first (scripts/setup.sh; a no-op once done).
PY := .venv/bin/python

.PHONY: setup run test book check-browser two-nodes bench lab clean

setup:
	@sh scripts/setup.sh

run: setup  ## the main job: a real 4-rank process group checked from the terminal
	$(PY) -m ddplab check --world-size 4

test: setup  ## lint, the library's tests, then every lab under nbval
	.venv/bin/ruff check .  # the whole repository, labs included (pyproject.toml)
	$(PY) -m pytest

book: setup  ## the book, every page executed by real runs; warnings are errors
	.venv/bin/jupyter-book build . --builder html -W -n --keep-going
	@echo "The book is in _build/html: open _build/html/index.html"

check-browser: setup  ## the built book in Chromium: every page, its static panels, one lab in JupyterLab
	$(PY) scripts/check_book_in_browser.py

two-nodes: setup  ## one experiment as two torchrun nodes on this machine, checked against the local pool
	$(PY) scripts/two_nodes.py

bench: setup  ## the warm pool against cold spawn; the time cost; a slider move's run and draw
	$(PY) benchmarks/pool_latency.py
	$(PY) benchmarks/time_cost.py
	$(PY) benchmarks/slider_draw.py

clean:
	rm -rf .venv _build .pytest_cache

lab: setup  ## JupyterLab on the labs
	.venv/bin/jupyter lab labs/
