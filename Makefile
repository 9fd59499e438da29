# Every target sets up .venv first (scripts/setup.sh; a no-op once done).
PY := .venv/bin/python

.PHONY: setup run test book check-browser check-pages check-labs two-nodes report bench bench-sliders lab clean colab-sim colab-sim-313 gpu-check check-wheel check-workflows

setup:
	@sh scripts/setup.sh

run: setup  ## the main job: a real 4-rank process group checked from the terminal
	$(PY) -m ddplab check --world-size 4

test: setup  ## lint, the library's tests, then every lab under nbval
	.venv/bin/ruff check .
	$(PY) -m pytest -n 3 --dist loadfile

book: setup  ## the book, every page executed by real runs; warnings are errors
	.venv/bin/jupyter-book build . --builder html -W -n --keep-going
	@echo "The book is in _build/html: open _build/html/index.html"

check-browser: setup  ## the built book in Chromium: every page, its static panels, each lab's first slider in JupyterLab
	$(PY) scripts/check_book_in_browser.py

check-pages: setup  ## check-browser's pages, search and report page only (needs make book)
	$(PY) scripts/check_book_in_browser.py --no-lab

check-labs: setup  ## check-browser's labs only: no built book needed
	$(PY) scripts/check_book_in_browser.py --labs-only

report: setup  ## ddplab report --quick on 2 local ranks: _build/report/report.{html,json}
	$(PY) -m ddplab report --world-size 2 --quick --out _build/report

two-nodes: setup  ## one experiment as two torchrun nodes on this machine, checked against the local pool
	$(PY) scripts/two_nodes.py

bench: setup  ## the warm pool, the time cost, slider moves (first and every), sweeps' first figures, shipping a cell function, memory
	$(PY) benchmarks/pool_latency.py
	$(PY) benchmarks/time_cost.py
	$(PY) benchmarks/slider_draw.py
	$(PY) benchmarks/all_sliders.py
	$(PY) benchmarks/sweep_first_figure.py labs/03_lr_scaling.ipynb
	$(PY) benchmarks/sweep_first_figure.py labs/05_time_cost.ipynb
	$(PY) benchmarks/shipping.py
	$(PY) benchmarks/memory.py

bench-sliders: setup  ## every slider of every lab moved in JupyterLab in Chromium, timed to the new figure (about 25 min; writes RESULTS.md)
	$(PY) benchmarks/sliders_in_browser.py --write

gpu-check: setup  ## on a GPU machine: every command (W=1 on NCCL; gloo on CUDA), page, test, lab and the GPU benchmark, one table
	$(PY) scripts/gpu_check.py

colab-sim: setup  ## lab 1 installed from a wheel and run in a fresh venv with Colab's versions
	$(PY) scripts/colab_sim.py

check-wheel: setup  ## wheel and sdist built, twine check, the wheel's check and doctor in a fresh venv
	$(PY) scripts/check_wheel.py

check-workflows: setup  ## .github/workflows against GitHub's workflow schema, offline
	.venv/bin/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml

# Colab's own Python 3.13 and torch 2.11 (PyPI's CUDA build, 2.7 GB with its CUDA packages):
# by hand, not in CI (README, "Run it"). The venv is kept in COLAB313_DIR and reused next time.
PYTHON313 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13) python3.13)
COLAB313_DIR ?= $(HOME)/.cache/ddplab/colab-313
colab-sim-313: setup  ## every lab, then the tests, on Colab's Python 3.13 and torch 2.11 (downloads 2.7 GB once)
	$(PY) scripts/colab_sim.py labs/*.ipynb --python $(PYTHON313) --torch torch==2.11.0 \
		--keep $(COLAB313_DIR) --tests

clean:
	rm -rf .venv _build .pytest_cache

lab: setup  ## JupyterLab on the labs (defaults from scripts/jupyterlab: no news prompt)
	.venv/bin/jupyter lab --LabApp.app_settings_dir=$(CURDIR)/scripts/jupyterlab labs/
