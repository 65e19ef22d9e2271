"""Runs otter's autograder on Gradescope (and in ``otter grade``'s containers) as otter's own
run_otter.py does, except that no submission can stall it, fool it without being flagged, or
read its hidden tests through it.

The exercises' build puts this file into every autograder zip in place of otter's, with
kernel_bound.py, kernel_sandbox.py and integrity.py beside it and the zip's settings (the
cell and test limits, the starter notebook's cells) in ``agentbook-grading.json``; the class
command's process pool uses the same functions (scripts/course/grading.py). Grading a
submission here:

- reads its source first, and flags for an instructor's review any cell that reaches into
  the grader (integrity.scan);
- runs its kernel, where bubblewrap can make one, in a sandbox that reaches no file but its
  own folder and no process or network but its own (kernel_sandbox.py);
- runs it with every cell and every test bounded by this process (kernel_bound.py). When a
  cell or a test overruns and ignores the interrupt, or when the kernel dies in a cell
  (``os._exit``, a crash, running out of memory), otter would raise and write no results at
  all. Here the submission is graded again with that cell replaced by one that raises a
  clear error, or with that test failed at once, so every other question keeps its points;
  after a few such stops it ends with a score of zero and a message that says where;
- checks the runner in the kernel before the tests run and the results after, and refuses to
  score a submission that changed the runner;
- cuts every error to its type and first line and redacts the hidden tests from it, in the
  results themselves, so every report made from them is clean;
- ends every process the submission started.

It imports only otter and what otter depends on: nothing of the book is installed where it runs.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import sys
import tempfile
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from unittest.mock import patch

import nbformat

try:  # in the book's repository
    from scripts.course import integrity, kernel_bound, kernel_sandbox, time_limit
except ImportError:  # in the autograder zip, beside this file
    import integrity  # type: ignore[import-not-found, no-redef]
    import kernel_bound  # type: ignore[import-not-found, no-redef]
    import kernel_sandbox  # type: ignore[import-not-found, no-redef]
    import time_limit  # type: ignore[import-not-found, no-redef]

Limits, RunningTest, Watch = kernel_bound.Limits, kernel_bound.RunningTest, kernel_bound.Watch
T = TypeVar("T")
AUTOGRADER = "/autograder"
SETTINGS_FILE = "agentbook-grading.json"
# Where nothing says otherwise, the longest a cell may run, as the class command's --timeout
# default: a cell that runs longer costs only its question. The zip's build may set another.
CELL_SECONDS = 300
TEST_SECONDS = 10
MAX_STOPS = 4  # cells or tests stopped, or kernel deaths, before a submission is not graded


@dataclass(frozen=True)
class Settings:
    """What the zip's build decided: the limits, and the starter notebook's code cells."""

    limits: Limits = Limits(CELL_SECONDS, TEST_SECONDS)
    starter: frozenset[str] = frozenset()  # digests of the code cells as handed out

    @classmethod
    def from_json(cls, text: str | None) -> Settings:
        data = json.loads(text) if text else {}
        return cls(Limits(float(data.get("cell_seconds", CELL_SECONDS)),
                          float(data.get("test_seconds", TEST_SECONDS))),
                   frozenset(data.get("starter_cells", ())))

    @classmethod
    def of_zip(cls, archive: Path) -> Settings:
        with zipfile.ZipFile(archive) as opened:
            names = set(opened.namelist())
            return cls.from_json(opened.read(SETTINGS_FILE).decode("utf-8")
                                 if SETTINGS_FILE in names else None)


@dataclass
class Session:
    """One submission's grading: its limits and marks, and what the grader learned."""

    settings: Settings
    limits: Limits
    folder: Path  # scratch: the progress file
    mark: str = field(default_factory=lambda: uuid.uuid4().hex)
    word: str = field(default_factory=integrity.new_word)  # the guard's report carries it
    secrets: integrity.Secrets = field(default_factory=integrity.Secrets)
    shapes: dict[str, list[tuple[str, float, bool]]] = field(default_factory=dict)
    review: list[str] = field(default_factory=list)  # why an instructor should look
    tampered: str = ""  # what in the runner changed: the submission is not scored
    on_kernel: Callable[[int], None] | None = None
    on_cell: Callable[[Any], None] | None = None
    groups: set[int] = field(default_factory=set)
    adopted: bool = False  # this process adopts orphans (kernel_bound.adopt_orphans)
    watching: Watch | None = None  # the watch of the grading under way

    def watch(self) -> Watch:
        progress = self.folder / "progress"
        progress.write_text("", encoding="utf-8")
        self.watching = Watch(self.limits, progress, self.test_count(), self.on_kernel,
                              self.on_cell)
        return self.watching

    def test_count(self) -> int:
        """How many test cases the assignment has (until the tests are read, a hundred)."""
        return sum(len(cases) for cases in self.shapes.values()) or 100

    def prepare(self, notebook: nbformat.NotebookNode) -> None:
        """Add the guard's two cells around the submission's code (integrity.guard_cells)."""
        code = time_limit.limit_code(self.limits.test_seconds)
        first, last = integrity.guard_cells(code, self.word)
        starts = [i for i, cell in enumerate(notebook.cells)
                  if "init_grading_mode(" in cell.source]
        ends = [i for i, cell in enumerate(notebook.cells)
                if "GradingResults(Checker.get_results())" in cell.source]
        ours = {kernel_bound.GRADER_CELL: True}
        for cell in notebook.cells:  # a submission's cells may claim to be the grader's
            cell.get("metadata", {}).pop(kernel_bound.GRADER_CELL, None)
        if starts and ends:  # otter's own first cell, and its last, which writes the results
            for index in (starts[0], ends[-1]):
                notebook.cells[index].setdefault("metadata", {}).update(ours)
            notebook.cells.insert(ends[-1], nbformat.v4.new_code_cell(last, metadata=ours))
            notebook.cells.insert(starts[0] + 1, nbformat.v4.new_code_cell(first,
                                                                           metadata=ours))

    def learn_tests(self, texts: dict[str, str]) -> None:
        """The tests as the grader holds them, read before the kernel could change them."""
        if not self.shapes:
            self.secrets = integrity.Secrets.of(texts.values())
            self.shapes = integrity.test_shapes(texts)
        if self.watching is not None:  # before any cell runs: its limits count the tests
            self.watching.tests = self.test_count()

    def check(self, results: Any) -> None:
        """Trust the results only as far as they deserve, and clean every message in them."""
        reported = integrity.verdict(results.notebook, self.word)
        broken = results.has_catastrophic_failure()
        changed = [] if broken else integrity.shape_changes(results, self.shapes)
        if reported is not None and reported.startswith("the grader's check"):
            self.review.append(reported)
        elif reported is not None:
            changed.insert(0, "its code changed the grader's runner: "
                           + reported.removeprefix("changed: "))
        if changed:  # said where the score is: the status, Gradescope's "Not scored"
            self.tampered = "; ".join(changed)
        if broken:
            error = results.catastrophic_error
            self.review.append("its results could not be read back: "
                               + self.secrets.error(type(error).__name__, str(error)))
            return
        for test_file in results.results.values():
            if changed:
                test_file.update_score(0)
        clean_messages(results, self.secrets)

    def end(self) -> None:
        kernel_bound.end_processes(self.mark, self.groups, self.adopted)


def clean_messages(results: Any, secrets: integrity.Secrets) -> None:
    """Every failed test's message in otter's results cut to its error's type and first line,
    with nothing of a hidden test (integrity.test_message), before anything reports it."""
    for test_file in results.results.values():
        for result in test_file.test_case_results:
            if not result.passed:
                result.message = integrity.test_message(str(result.message or ""),
                                                        bool(result.test_case.hidden), secrets)


@contextlib.contextmanager
def checked_results(session: Session) -> Iterator[None]:
    """While otter grades: it reads the tests where ``session`` learns them first, loads the
    kernel's results with an unpickler that makes only otter's classes, and hands them to
    ``session.check`` before anything is reported from them; its logging server makes no
    object of any class from what it receives, and no ``.OTTER_LOG`` is loaded."""
    import otter.execute as execute
    from otter.check.logs import Log
    from otter.execute import logging as log_server
    from otter.run.run_autograder.runners import python_runner

    original = python_runner.grade_notebook

    def grade_notebook(submission_path: str, *, tests_glob: list[str] | None = None,
                       **kwargs: Any) -> Any:
        session.learn_tests({path: Path(path).read_text(encoding="utf-8")
                             for path in tests_glob or []})
        results = original(submission_path, tests_glob=tests_glob, **kwargs)
        session.check(results)
        return results

    with patch.object(python_runner, "grade_notebook", grade_notebook), \
            patch.object(execute, "pickle", integrity.SafePickle), \
            patch.object(log_server.LogRecordStreamHandler, "unpickle",
                         integrity.plain_log_record), \
            patch.object(Log, "from_file", integrity.refuse_log):
        yield


class KernelDied(Exception):
    """The kernel was stopped or died too often: the message says in which cells."""


def cell_name(cell: Any) -> str:
    if kernel_bound.is_grader_cell(cell):
        if cell.source.startswith("from otter"):  # otter's, which set up and run the tests
            return "otter's own cell, which runs the tests"
        return "the grader's check of its runner"
    return f"cell {cell.get('id') or cell.source.split(chr(10), 1)[0][:40]}"


def without_cell(notebook: nbformat.NotebookNode, dead: Any,
                 why: str = "") -> nbformat.NotebookNode | None:
    """The notebook with the cell the kernel died in, or was stopped in, replaced by one that
    raises; None when that cell is not the student's (otter's own cells, the grader's)."""
    copy = nbformat.from_dict(notebook)
    code = [cell for cell in copy.cells if cell.cell_type == "code"]
    # By id, and among cells that share one (a hand-edited file), by source; by source alone
    # where the notebook has no ids (otter's copy may have made some up).
    by_id = [cell for cell in code if dead.get("id") and cell.get("id") == dead.get("id")]
    by_source = [cell for cell in code if cell.source == dead.source]
    same = ([cell for cell in by_id if cell in by_source] if len(by_id) > 1 else by_id
            ) or by_source
    if not same or kernel_bound.is_grader_cell(dead):
        return None
    message = why or (f"the kernel died while running {cell_name(dead)}, so grading skipped "
                      "it: find what ends the process there (os._exit, a crash, running out "
                      "of memory)")
    same[0].source = f"raise {'TimeoutError' if why else 'RuntimeError'}({message!r})"
    same[0].outputs = []
    return copy


def grade_surviving(notebook: nbformat.NotebookNode,
                    grade: Callable[[nbformat.NotebookNode], T],
                    session: Session) -> tuple[T, str]:
    """``grade(notebook)`` under the session's limits, again each time a cell or test had to
    be stopped or the kernel died, with that cell replaced or that test failed at once; the
    result and what happened ("" when nothing did). KernelDied after MAX_STOPS stops."""
    from nbclient.exceptions import DeadKernelError

    stopped: list[RunningTest] = []
    notes: list[str] = []
    places: list[str] = []
    version = notebook
    for _ in range(MAX_STOPS + 1):
        watch = session.watch()
        environment = {kernel_bound.PROGRESS_VARIABLE: str(watch.progress),
                       kernel_bound.MARK_VARIABLE: session.mark,
                       kernel_bound.STOPPED_VARIABLE: " ".join(test.key for test in stopped),
                       time_limit.ENVIRONMENT_VARIABLE: f"{session.limits.test_seconds:g}"}
        try:
            with patch.dict(os.environ, environment), checked_results(session), \
                    kernel_bound.bounded_execution(watch, session.prepare):
                return grade(version), "; ".join(notes)
        except DeadKernelError:
            pass
        finally:
            session.groups |= watch.groups
            session.end()
        stop, cell = watch.stopped, watch.running
        if stop is not None and stop.test is not None:
            stopped.append(stop.test)
            places.append(f"{stop.test.question} ({stop.test.label})")
            continue
        where = cell_name(cell) if cell is not None else "a cell"
        places.append(where)
        if stop is not None:
            why = (f"{where} ran past its {stop.seconds:g} s limit and did not stop when "
                   "interrupted, so grading stopped it")
            note = f"{where}: ran past its {stop.seconds:g} s limit and ignored the interrupt; "
        else:
            why, note = "", f"{where}: the kernel died there; "
        replaced = without_cell(version, cell, why) if cell is not None else None
        if replaced is None:
            raise KernelDied(describe(stop is not None, places))
        version = replaced
        notes.append(note + "graded again with that cell raising an error")
    raise KernelDied(describe(False, places))


def describe(stopped: bool, places: list[str]) -> str:
    if len(places) == 1:
        return f"the kernel {'was stopped' if stopped else 'died'} in {places[0]}"
    return (f"the kernel was stopped or died {len(places)} times, in "
            + ", ".join(places[:-1]) + f" and {places[-1]}")


def failed_results(message: str) -> dict[str, Any]:
    """Gradescope's results.json for a submission that could not be graded: zero, and why."""
    return {"score": 0, "stdout_visibility": "hidden", "tests": [
        {"name": "Autograder", "visibility": "visible", "status": "failed",
         "output": f"Your notebook could not be graded: {message}."}]}


def annotate(results: dict[str, Any], note: str, session: Session) -> dict[str, Any]:
    """Gradescope's results, with what happened said where the student sees the scores, and
    the review flag where only instructors see it."""
    entries = []
    if note:
        entries.append({"name": "Autograder", "visibility": "visible", "status": "failed",
                        "output": note})
    if session.tampered:
        results["score"] = 0
        entries.append({"name": "Not scored", "visibility": "visible", "status": "failed",
                        "output": "Your notebook was not scored: its code changed the "
                        "grader's own test runner. Your instructor will look at it."})
    review = session.review + [f"not scored: {session.tampered}"] * bool(session.tampered)
    if review:
        entries.append({"name": "Flagged for review", "visibility": "hidden",
                        "status": "failed", "output": "\n".join(review)})
    results["tests"] = entries + results.get("tests", [])
    return results


def main(autograder: str = AUTOGRADER, adopted: bool = False) -> None:
    """Otter's autograder on the one notebook in ``autograder``/submission."""
    from otter.run.run_autograder import main as run_autograder

    results_path = os.path.join(autograder, "results", "results.json")
    notebooks = glob.glob(os.path.join(autograder, "submission", "*.ipynb"))
    if len(notebooks) != 1:  # otter alone would grade a script, or a log, unguarded
        with open(results_path, "w", encoding="utf-8") as file:
            json.dump(failed_results("hand in exactly one notebook (.ipynb) and nothing "
                                     f"else; found {len(notebooks)}"), file, indent=4)
        return
    [path] = notebooks
    notebook = nbformat.read(path, as_version=4)
    source = Path(autograder, "source", SETTINGS_FILE)
    settings = Settings.from_json(source.read_text(encoding="utf-8") if source.is_file()
                                  else None)

    folder = Path(path).parent

    def grade(version: nbformat.NotebookNode) -> None:
        # The folder holds the notebook alone, written afresh for every run: anything else
        # handed in (a script, a .OTTER_LOG) otter might run, and the kernel could write
        # here on an earlier run (a link where the notebook was).
        shutil.rmtree(folder)
        folder.mkdir()
        nbformat.write(version, path)
        run_autograder(autograder)

    with tempfile.TemporaryDirectory(prefix="agentbook-grading-") as scratch:
        session = Session(settings, settings.limits, Path(scratch), adopted=adopted)
        session.review += integrity.scan(notebook, set(settings.starter))
        notebook = integrity.without_otter_metadata(notebook)
        note = ""
        try:
            _, note = grade_surviving(notebook, grade, session)
            with open(results_path, encoding="utf-8") as file:
                results = json.load(file)
        except KernelDied as died:
            results = failed_results(str(died))
        finally:
            session.end()
    with open(results_path, "w", encoding="utf-8") as file:
        json.dump(annotate(results, note, session), file, indent=4)


if __name__ == "__main__":
    # Gradescope runs `python /autograder/source/run_otter.py`; folders laid out as
    # Gradescope's may be given instead, graded in turn.
    adopted = kernel_bound.adopt_orphans()
    if kernel_sandbox.boundary():  # in the autograder's output, which only instructors see
        print(f"agentbook: kernels are {kernel_sandbox.boundary()}")
    for folder in sys.argv[1:] or [AUTOGRADER]:
        main(folder, adopted=adopted)
