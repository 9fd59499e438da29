"""Strip every output from the lab notebooks except those of cells nbval checks.

    python scripts/clean_labs.py labs/*.ipynb        # rewrite in place
    python scripts/clean_labs.py --check labs/*.ipynb  # exit 1 if any notebook is not clean

Cells marked ``# NBVAL_CHECK_OUTPUT`` keep their outputs: they are what nbval compares with.
Everything else (other outputs, saved widget state, run timestamps) is recomputed by whoever
runs the lab, so it is not kept in git.
"""

import sys

import nbformat

MARK = "# NBVAL_CHECK_OUTPUT"


def clean(nb) -> bool:
    changed = False
    # Widget state saved by an executed notebook (often with PNGs inside): recomputed on run.
    if nb.metadata.pop("widgets", None) is not None:
        changed = True
    for cell in nb.cells:
        if cell.metadata.pop("execution", None) is not None:  # run timestamps
            changed = True
        if cell.cell_type != "code":
            continue
        keep = cell.source.lstrip().startswith(MARK)
        if not keep and (cell.outputs or cell.execution_count is not None):
            cell.outputs, cell.execution_count = [], None
            changed = True
        # A checked cell keeps a fixed execution count: nbval treats a cell without one as
        # never run and refuses its outputs as a reference.
        for output in cell.outputs:
            if output.get("execution_count") not in (None, 1):
                output["execution_count"] = 1
                changed = True
        if keep and cell.execution_count != 1:
            cell.execution_count = 1
            changed = True
    return changed


def main(argv) -> int:
    check = "--check" in argv
    dirty = []
    for path in (a for a in argv if a != "--check"):
        nb = nbformat.read(path, as_version=4)
        if clean(nb):
            dirty.append(path)
            if not check:
                nbformat.write(nb, path)
    if check and dirty:
        print("notebooks with outputs to strip (python scripts/clean_labs.py):", *dirty)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
