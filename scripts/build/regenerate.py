"""Regenerate everything the chapters produce: the package, the outputs, the figures.

Run as ``python -m scripts.build.regenerate [NOTEBOOK ...]``: it saves the ``# @save`` cells
into ``agentbook/``, then executes each chapter in place, in order, keeping only metadata
that is the same on every machine; the chapters' own cells write the figures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from scripts.build import save

ROOT = Path(__file__).resolve().parents[2]
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
# A cell tagged like this is shown but never run: the one live-model call.
SKIP_TAG = "skip-execution"


def normalize(notebook: nbformat.NotebookNode) -> None:
    """Drop what changes between machines and runs; keep the kernelspec, cell ids and tags,
    outputs, and execution counts (nbval needs them), renumbered from 1 over the cells run."""
    notebook.metadata = nbformat.NotebookNode({"kernelspec": KERNELSPEC})
    count = 0
    for cell in notebook.cells:
        tags = cell.metadata.get("tags")
        cell.metadata = nbformat.NotebookNode({"tags": tags} if tags else {})
        if cell.cell_type != "code":
            continue
        if cell.outputs or cell.execution_count is not None:
            count += 1
            cell.execution_count = count
            for output in cell.outputs:
                if "execution_count" in output:
                    output.execution_count = count


def execute(path: Path, timeout: int = 120) -> None:
    """Run one notebook top to bottom in its own folder and store the result."""
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", record_timing=False,
        resources={"metadata": {"path": str(path.parent)}}, skip_cells_with_tag=SKIP_TAG,
        # A kernel starts in a few seconds, but on a busy machine (two regenerations, a test
        # run and other work sharing two cores) it has been seen to take over a minute.
        startup_timeout=300,
        # The kernel flushes prints on a timer, so one print can arrive in two pieces; merge
        # them so the stored text does not depend on how busy the machine was.
        coalesce_streams=True,
    ).execute()
    normalize(notebook)
    nbformat.write(notebook, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="execute only these notebooks (default: every chapter)")
    args = parser.parse_args(argv)
    try:
        save.write_modules(ROOT, save.build_modules(ROOT))
    except save.SaveError as error:
        print(error, file=sys.stderr)
        return 2
    for path in args.notebooks or save.find_notebooks(ROOT):
        print(f"executing {path.relative_to(ROOT) if path.is_absolute() else path}")
        execute(path.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
