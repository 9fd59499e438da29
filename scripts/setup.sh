#!/bin/sh
# Make .venv with ddplab (editable) and the tools that test it and build the book.
# Idempotent: a second run does nothing unless a requirements file changed.
#
# torch: where the Python running this already has torch (Colab, a CUDA machine), the venv
# sees it (--system-site-packages) and keeps it: requirements.txt only asks for a range.
# Where there is none, install the CPU build first, so that nothing pulls PyPI's multi-GB
# CUDA build: torch==2.13.0+cpu from a local wheel (pip's find-links) or PyTorch's CPU index.
set -eu
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=.venv
if [ ! -x "$VENV/bin/python" ]; then
    if "$PYTHON" -c "import torch" 2>/dev/null; then
        echo "setup: keeping the torch that $PYTHON already has"
        "$PYTHON" -m venv --system-site-packages "$VENV"
    else
        "$PYTHON" -m venv "$VENV"
    fi
fi
STAMP="$VENV/.ddplab-installed"
if [ -f "$STAMP" ] && [ "$STAMP" -nt requirements.txt ] && [ "$STAMP" -nt requirements-dev.txt ] \
        && [ "$STAMP" -nt pyproject.toml ]; then
    exit 0
fi
PIP="$VENV/bin/python -m pip --disable-pip-version-check -q"
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    echo "setup: installing the CPU build of torch"
    $PIP install "torch==2.13.0+cpu" 2>/dev/null \
        || $PIP install "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu
fi
echo "setup: installing ddplab and its tools into $VENV"
$PIP install -r requirements-dev.txt
touch "$STAMP"
