"""Runs otter's autograder on Gradescope (and in ``otter grade``'s containers) as otter's own
run_otter.py does, except that a kernel that dies costs only the cell it died in.

The exercises' build puts this file into every autograder zip in place of otter's; the class
command's process pool uses the same functions (scripts/course/grading.py). Every cell runs
within a time limit (otter sets none), so a cell that never ends costs its own question and
not the whole submission. When the kernel
dies during a cell (``os._exit``, a crash, running out of memory), otter raises and writes no
results at all: the student would see a failed autograder. Here the submission is graded
again with that cell replaced by one that raises a clear error, so the questions before and
after it keep the points they earn. A kernel that dies again ends with a score of zero and a
message that says where it died, never without results.

It imports only otter and what otter depends on: nothing of the book is installed where it runs.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from unittest.mock import patch

import nbformat

T = TypeVar("T")
AUTOGRADER = "/autograder"
# Where nothing says otherwise (Gradescope, otter grade), the longest a cell may run, as the
# class command's --timeout default: a cell that runs longer costs only its question.
CELL_SECONDS = 300


@contextmanager
def cell_time_limit(seconds: float) -> Iterator[None]:
    """Interrupt any cell that runs longer than ``seconds`` (otter sets no limit on its
    ExecutePreprocessor), so that only the question that hangs loses its points."""
    import nbconvert.preprocessors as preprocessors

    original = preprocessors.ExecutePreprocessor

    class TimedPreprocessor(original):  # type: ignore[misc, valid-type]
        def __init__(self, **kwargs: object) -> None:
            super().__init__(**kwargs)
            self.interrupt_on_timeout = True
            self.timeout_func = self.limit

        @staticmethod
        def limit(cell: Any) -> int:
            # Otter's own cells (its set-up, and the last one, which runs every test not yet
            # run) and the check cells get more: every test in them has a limit of its own,
            # and stopping them would cost every question, or a question's every test.
            checks = "from otter" in cell.source or "grader.check(" in cell.source
            return max(1, round(seconds)) * (5 if checks else 1)

    with patch.object(preprocessors, "ExecutePreprocessor", TimedPreprocessor):
        yield


class KernelDied(Exception):
    """The kernel died twice: the message says in which cells."""


@contextmanager
def running_cell() -> Iterator[dict[str, Any]]:
    """Remember which cell otter's executor is running: ``{"cell": cell}`` after a run, so
    the cell a kernel died in is known when nbclient raises DeadKernelError."""
    import nbconvert.preprocessors as preprocessors

    seen: dict[str, Any] = {"cell": None}
    original = preprocessors.ExecutePreprocessor

    class Remembering(original):  # type: ignore[misc, valid-type]
        def preprocess_cell(self, cell: Any, resources: Any, index: int) -> Any:
            seen["cell"] = cell
            return super().preprocess_cell(cell, resources, index)

    with patch.object(preprocessors, "ExecutePreprocessor", Remembering):
        yield seen


def cell_name(cell: Any) -> str:
    if cell.source.startswith("from otter"):  # the cells otter adds to set up and run tests
        return "otter's own cell, which runs the tests"
    return f"cell {cell.get('id') or cell.source.split(chr(10), 1)[0][:40]}"


def without_cell(notebook: nbformat.NotebookNode, dead: Any) -> nbformat.NotebookNode | None:
    """The notebook with the cell the kernel died in replaced by one that raises; None when
    that cell is not the student's (otter's own cells, which run the tests)."""
    copy = nbformat.from_dict(notebook)
    code = [cell for cell in copy.cells if cell.cell_type == "code"]
    # By id, and among cells that share one (a hand-edited file), by source; by source alone
    # where the notebook has no ids (otter's copy may have made some up).
    by_id = [cell for cell in code if dead.get("id") and cell.get("id") == dead.get("id")]
    by_source = [cell for cell in code if cell.source == dead.source]
    same = ([cell for cell in by_id if cell in by_source] if len(by_id) > 1 else by_id
            ) or by_source
    if not same:
        return None
    message = (f"the kernel died while running {cell_name(dead)}, so grading skipped it: "
               "find what ends the process there (os._exit, a crash, running out of memory)")
    same[0].source = f"raise RuntimeError({message!r})"
    same[0].outputs = []
    return copy


def grade_surviving(notebook: nbformat.NotebookNode,
                    grade: Callable[[nbformat.NotebookNode], T]) -> tuple[T, str]:
    """``grade(notebook)``, and once more without the cell the kernel died in if it died;
    the result and what happened, "" when the kernel lived. KernelDied when it died again."""
    from nbclient.exceptions import DeadKernelError

    with running_cell() as seen:
        try:
            return grade(notebook), ""
        except DeadKernelError:
            dead = seen["cell"]
    replaced = without_cell(notebook, dead) if dead is not None else None
    where = cell_name(dead) if dead is not None else "a cell"
    if replaced is None:
        raise KernelDied(f"the kernel died in {where}")
    with running_cell() as seen:
        try:
            return grade(replaced), (f"{where}: the kernel died there; graded again with "
                                     "that cell raising an error")
        except DeadKernelError:
            again = seen["cell"]
    raise KernelDied(f"the kernel died in {where}, and again in "
                     f"{cell_name(again) if again is not None else 'a cell'}")


def failed_results(message: str) -> dict[str, Any]:
    """Gradescope's results.json for a submission that could not be graded: zero, and why."""
    return {"score": 0, "stdout_visibility": "hidden", "tests": [
        {"name": "Autograder", "visibility": "visible", "status": "failed",
         "output": f"Your notebook could not be graded: {message}."}]}


def main(autograder: str = AUTOGRADER) -> None:
    """Otter's autograder on the one notebook in ``autograder``/submission."""
    from otter.run.run_autograder import main as run_autograder

    notebooks = glob.glob(os.path.join(autograder, "submission", "*.ipynb"))
    if len(notebooks) != 1:  # otter says what is wrong with the submission
        run_autograder(autograder)
        return
    [path] = notebooks
    notebook = nbformat.read(path, as_version=4)

    def grade(version: nbformat.NotebookNode) -> None:
        nbformat.write(version, path)
        run_autograder(autograder)

    try:
        with cell_time_limit(CELL_SECONDS):
            _, note = grade_surviving(notebook, grade)
    except KernelDied as died:
        with open(os.path.join(autograder, "results", "results.json"), "w",
                  encoding="utf-8") as file:
            json.dump(failed_results(str(died)), file, indent=4)
        return
    if note:  # said where the student sees the results, beside the scores
        results_path = os.path.join(autograder, "results", "results.json")
        with open(results_path, encoding="utf-8") as file:
            results = json.load(file)
        results["tests"].insert(0, {"name": "Autograder", "visibility": "visible",
                                    "status": "failed", "output": note})
        with open(results_path, "w", encoding="utf-8") as file:
            json.dump(results, file, indent=4)


if __name__ == "__main__":
    main()
