"""Grade exercise submissions with otter-grader, one notebook or a whole class.

    python -m scripts.course.grading fixtures [--check]
        write (or check) the graded fixtures in tests/fixtures/submissions/: the
        correct solution, the unanswered student notebook and each plausible
        wrong answer of exercises/source/wrong-answers.yml, made from the annotated source
    python -m scripts.course.grading class DIR --autograder ZIP [-o grading] [--update]
        grade every notebook (or otter export zip) in DIR into a graded folder: grades.csv,
        feedback/NAME.txt, the written-answers page to mark from and the marks file to
        fill in (scripts/course/results.py); --update grades a few files again into it
    python -m scripts.course.grading written grading [--marks CSV]
        merge written marks into a graded folder, every row checked, grading nothing again
    python -m scripts.course.grading answers [-o answers]
        write the model-answer notebooks, to hand out once the deadline has passed

Grading runs the autograder zip of ``otter assign``: with Docker through ``otter grade``,
otherwise through ``otter run`` in a pool of worker processes (in this environment), each
submission within limits its code cannot reach and under a deadline of its own (run_otter.py).
instructors.qmd is the instructor's guide to these commands.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import json
import math
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path, PurePosixPath
from typing import Any
from unittest.mock import patch

import nbformat
import yaml

from scripts.build.generated import read_files, sync
from scripts.course.answers import (
    ANSWER_TAG,
    Assignment,
    answers_in,
    correct_submission,
    load_assignment,
    question_points,
    unanswered,
    write_model_answers,
)
from scripts.course.answers import model_answers as model_answers  # for the tests, as before
from scripts.course.answers import solution_code as solution_code
from scripts.course.exercises import ExercisesError, build, normalize, source_notebooks
from scripts.course import integrity, kernel_bound, kernel_sandbox
from scripts.course.integrity import Secrets, cut
from scripts.course.results import (
    RECORD,
    Record,
    Submission,
    load_record,
    needs_a_look,
    with_unanswered,
    write_folder,
)
from scripts.course.results import write_scores as write_scores  # for the tests and the bench
from scripts.course.run_otter import KernelDied, Session, Settings, grade_surviving
from scripts.course.similarity import THRESHOLD
from scripts.course.time_limit import DEFAULT_SECONDS
from scripts.course.written import TEMPLATE, MarksError, read_marks, written_total

ROOT = Path(__file__).resolve().parents[2]
FIXTURES_DIR = "tests/fixtures/submissions"


class GradingError(Exception):
    """A submission could not be graded; the message says which one and why."""


@dataclass(frozen=True)
class Score:
    """How one submission did on one autograded question."""

    points: float
    public_passed: bool  # whether every public test passed: the student's own feedback
    public_messages: tuple[str, ...]  # what the failed public tests told the student
    hidden_messages: tuple[str, ...] = ()  # what the failed hidden tests check, no source


@dataclass(frozen=True)
class WrongAnswer:
    """A plausible wrong answer to one question: edits to the correct notebook's answer cell."""

    question: str
    slug: str  # names the fixture: wrong-<question>-<slug>
    cell: str
    edits: tuple[tuple[str, str], ...]  # (text in the correct answer, what the student wrote)


def read_wrong_answers(path: Path) -> tuple[WrongAnswer, ...]:
    """The plausible wrong answers in ``path``; its header says what an entry holds."""
    entries = yaml.safe_load(path.read_text(encoding="utf-8"))
    return tuple(WrongAnswer(entry["question"], entry["slug"], entry["cell"],
                             tuple((edit["correct"], edit["wrong"]) for edit in entry["edits"]))
                 for entry in entries)


WRONG_ANSWERS_FILE = "exercises/source/wrong-answers.yml"
WRONG_ANSWERS = read_wrong_answers(ROOT / WRONG_ANSWERS_FILE)


@dataclass(frozen=True)
class HostileAnswer:
    """A submission that tries to stall the grader, fool it or read its hidden tests: a
    fixture submission of the first chapter with one cell edited."""

    slug: str  # names the fixture: hostile-<slug>
    base: str  # the fixture it starts from: correct or unanswered
    costs: str  # the question it may lose points on, "nothing" or "everything"
    cell: str
    edits: tuple[tuple[str, str], ...]


def read_hostile_answers(path: Path) -> tuple[HostileAnswer, ...]:
    """The hostile submissions in ``path``; its header says what an entry holds."""
    entries = yaml.safe_load(path.read_text(encoding="utf-8"))
    return tuple(HostileAnswer(entry["slug"], entry["from"], entry["costs"], entry["cell"],
                               tuple((edit["correct"], edit["wrong"])
                                     for edit in entry["edits"]))
                 for entry in entries)


HOSTILE_ANSWERS_FILE = "exercises/source/hostile-answers.yml"
HOSTILE_ANSWERS = read_hostile_answers(ROOT / HOSTILE_ANSWERS_FILE)


def wrong_answer_name(wrong: WrongAnswer) -> str:
    """The fixture's file stem, e.g. wrong-q3b-one-repeat-late."""
    return f"wrong-{wrong.question.split('_')[-1]}-{wrong.slug}"


def with_wrong_answer(correct: nbformat.NotebookNode, wrong: WrongAnswer) -> nbformat.NotebookNode:
    """The correct submission with one answer cell edited into ``wrong``."""
    return edited(correct, wrong.cell, wrong.edits,
                  f"{wrong_answer_name(wrong)}: the answer to {wrong.question}")


def edited(original: nbformat.NotebookNode, cell_id: str, edits: Iterable[tuple[str, str]],
           what: str) -> nbformat.NotebookNode:
    """A copy of ``original`` with each (old, new) edit made to the cell ``cell_id``."""
    notebook = nbformat.from_dict(original)
    [cell] = [cell for cell in notebook.cells if cell.id == cell_id]
    for old, new in edits:
        if cell.source.count(old) != 1:
            raise GradingError(f"{what} no longer contains, once, the text to change:\n{old}")
        cell.source = cell.source.replace(old, new)
    return notebook


def fixtures_folder(assignment: str) -> str:
    """Where one assignment's fixture submissions live, relative to the root: the first
    chapter's directly in FIXTURES_DIR, as before there were two, each later one's in a folder."""
    return FIXTURES_DIR if assignment == "anatomy" else f"{FIXTURES_DIR}/{assignment}"


def check_wrong_answers(wrong_answers: Iterable[WrongAnswer], sources: list[Path]) -> None:
    """Refuse a wrong answer to a question no assignment asks: a typo in its name would
    otherwise make no fixture, silently."""
    questions = {name for path in sources
                 for name in question_points(nbformat.read(path, as_version=4))}
    assignments = {path.stem.removesuffix("-exercises") for path in sources}
    for wrong in wrong_answers:
        if wrong.question not in questions:
            assignment = wrong.question.split("_")[0]
            known = (f"assignment {assignment} has no question {wrong.question}"
                     if assignment in assignments else
                     f"no assignment {assignment}; there are: {', '.join(sorted(assignments))}")
            raise GradingError(f"{WRONG_ANSWERS_FILE}: the wrong answer {wrong.slug!r} is "
                               f"for {wrong.question}, but {known}")


def fixture_files(root: Path) -> dict[str, str]:
    """Every fixture submission of every assignment: path relative to ``root`` -> text."""
    files: dict[str, str] = {}
    wrong_answers = read_wrong_answers(root / WRONG_ANSWERS_FILE)
    check_wrong_answers(wrong_answers, source_notebooks(root))
    for source_path in source_notebooks(root):
        assignment = source_path.stem.removesuffix("-exercises")  # anatomy-exercises: anatomy
        student = nbformat.read(root / "exercises" / source_path.name, as_version=4)
        source = nbformat.read(source_path, as_version=4)
        source_ids = {cell.id for cell in source.cells}
        correct = correct_submission(student, source)
        notebooks = {"correct": correct, "unanswered": student}
        for wrong in wrong_answers:
            if wrong.question.startswith(f"{assignment}_"):
                notebooks[wrong_answer_name(wrong)] = with_wrong_answer(correct, wrong)
        if assignment == "anatomy":
            for hostile in read_hostile_answers(root / HOSTILE_ANSWERS_FILE):
                notebooks[f"hostile-{hostile.slug}"] = edited(
                    notebooks[hostile.base], hostile.cell, hostile.edits,
                    f"hostile-{hostile.slug}: cell {hostile.cell}")
        folder = fixtures_folder(assignment)
        files.update({f"{folder}/{name}.ipynb": normalize(nbformat.writes(notebook), source_ids)
                      for name, notebook in notebooks.items()})
    return files


def committed_fixtures(root: Path) -> dict[str, str]:
    return read_files(root, [path.relative_to(root).as_posix()
                             for path in (root / FIXTURES_DIR).rglob("*.ipynb")])


def docker_available() -> bool:
    """Whether ``otter grade`` can start containers here."""
    docker = shutil.which("docker")
    return docker is not None and subprocess.run(
        [docker, "info"], capture_output=True).returncode == 0


@dataclass(frozen=True)
class Graded:
    """One submission's grading: a score per question it could be graded on, and what
    went wrong, if anything, in words an instructor can act on."""

    scores: dict[str, Score]
    status: str = "ok"
    cell_errors: dict[str, str] = field(default_factory=dict)  # question -> the error
    seconds: float = 0.0  # how long grading it took, on the clock, re-grading included
    # Reasons to read this submission before posting its grade, never a penalty: what its
    # source does that reaches into the grader (integrity.scan), a runner it changed, and
    # written answers much like another's (added by the class command).
    review: tuple[str, ...] = ()


CHECK_CALL = re.compile(r"""grader\.check\(["'](\w+)["']""")


def cell_errors(notebook: nbformat.NotebookNode,
                secrets: Secrets | None = None) -> dict[str, str]:
    """The error each answer cell of an executed notebook raised, by the question whose
    ``grader.check`` follows it: the cause a student must fix, not the symptom a test saw;
    each its type and first line, with nothing of a hidden test."""
    secrets = secrets or Secrets()
    errors: dict[str, str] = {}
    pending: list[str] = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        checked = CHECK_CALL.search(cell.source)
        if checked and ANSWER_TAG not in cell.metadata.get("tags", []):
            if pending:
                errors.setdefault(checked.group(1), "; ".join(pending))
            pending = []
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                what = ("ran past the time limit and was stopped"
                        if output.ename == "KeyboardInterrupt"
                        else f"raised {secrets.error(output.ename, output.evalue)}")
                pending.append(f"cell {cell.get('id', '?')} {what}")
    return errors


def grade_one(submission: Path, autograder: Path, timeout: float = 300,
              test_timeout: float = DEFAULT_SECONDS,
              tell: Callable[[str, Any], None] | None = None) -> Graded:
    """One submission graded by ``otter run``'s API, each cell within ``timeout`` seconds and
    each test within ``test_timeout``; an unreadable file or a kernel that dies or has to be
    stopped too often is reported in the status and scores nothing. ``tell`` hears of each
    kernel ("kernel", its process group) and cell ("cell", its name) as grading reaches it."""
    started = time.perf_counter()
    graded = grade_submission_once(submission, autograder, timeout, test_timeout, tell)
    return dataclasses.replace(graded, seconds=round(time.perf_counter() - started, 3))


def grade_submission_once(submission: Path, autograder: Path, timeout: float,
                          test_timeout: float,
                          tell: Callable[[str, Any], None] | None = None) -> Graded:
    """``grade_one`` without the clock (run_otter.py says how a submission is graded)."""
    from otter.api import grade_submission

    from scripts.course.run_otter import cell_name

    try:
        notebook = read_submission(submission)
    except Exception as error:  # nbformat and zipfile raise many kinds for a bad file
        return Graded({}, cut(f"unreadable: {type(error).__name__}: {error}"))
    settings = Settings.of_zip(autograder) if autograder.is_file() else Settings()
    mark = uuid.uuid4().hex
    if tell is not None:
        tell("mark", mark)
    review = integrity.scan(notebook, set(settings.starter))
    notebook = integrity.without_otter_metadata(notebook)

    def grade(version: nbformat.NotebookNode) -> Any:
        # Always the notebook that was scanned, never the file handed in: an export zip may
        # hold other files, which otter would grade in its place.
        with tempfile.TemporaryDirectory(prefix="agentbook-regrade-") as folder:
            path = Path(folder, f"{submission.stem}.ipynb")
            nbformat.write(version, path)
            return grade_submission(str(path), str(autograder), quiet=True)

    with tempfile.TemporaryDirectory(prefix="agentbook-grading-") as scratch:
        session = Session(settings, kernel_bound.Limits(timeout, test_timeout), Path(scratch),
                          mark=mark,
                          on_kernel=tell and (lambda group: tell("kernel", group)),
                          on_cell=tell and (lambda cell: tell("cell", cell_name(cell))))
        try:
            # Figures drawn with Agg, as nothing is shown.
            with patch.dict(os.environ, {"MPLBACKEND": "agg"}):
                results, note = grade_surviving(notebook, grade, session)
        except KernelDied as died:
            return Graded({}, cut(f"not graded: {died}"), review=tuple(review + session.review))
        except Exception as error:  # otter reports a broken submission by raising anything
            return Graded({}, "not graded: " + session.secrets.error(type(error).__name__,
                                                                     str(error)),
                          review=tuple(review + session.review))
        finally:
            session.end()
    return graded_from(results, session.secrets, note, session.tampered,
                       review + session.review)


def graded_from(results: Any, secrets: Secrets, note: str = "", tampered: str = "",
                review: Iterable[str] = ()) -> Graded:
    """A Graded made from otter's results (messages already cleaned, integrity.test_message):
    a score per question, and a status that names every cell that raised, every test stopped
    at its time limit, and a runner the submission changed."""
    review = tuple(review)
    if tampered:  # zero everywhere: integrity.py says why
        return Graded({}, cut(f"not scored: {tampered}", 300), review=review)
    if results.has_catastrophic_failure():
        error = results.catastrophic_error
        return Graded({}, "not graded: " + secrets.error(type(error).__name__, str(error)),
                      review=review)
    errors = cell_errors(results.notebook, secrets) if results.notebook is not None else {}
    # Six decimals: otter's sums of test points come out as 2.9999999999999996.
    scores = {name: Score(round(float(result.score), 6), result.passed_all_public,
                          tuple(str(case.message) for case in result.test_case_results
                                if not case.passed and not case.test_case.hidden),
                          tuple(str(case.test_case.failure_message or "a hidden test failed")
                                for case in result.test_case_results
                                if not case.passed and case.test_case.hidden))
              for name, result in results.results.items()}
    # A test stopped at its time limit says so itself (the question, the call, the limit).
    stopped = [str(case.message).rsplit("TimeoutError: ", 1)[-1]
               for result in results.results.values() for case in result.test_case_results
               if not case.passed and "TimeoutError: " in str(case.message)]
    parts = ([note] * bool(note) + [f"{question}: {error}" for question, error in errors.items()]
             + stopped)
    return Graded(scores, cut("; ".join(parts), 300) or "ok", errors, review=review)


def start_worker() -> None:
    """Import otter once per worker process, before the first submission arrives."""
    import otter.api  # noqa: F401


def pool_worker(connection: Connection) -> None:
    """A worker of the class pool: grade each submission the pool sends, telling it which
    kernel and cell grading reaches, until it sends None. Orphans of the submissions' kernels
    become this process's children, to be ended after each one (kernel_bound.py)."""
    adopted = kernel_bound.adopt_orphans()
    start_worker()
    while (job := connection.recv()) is not None:
        path, autograder, timeout, test_timeout = job
        connection.send(("started", None))  # the submission's deadline starts now
        graded = grade_one(path, autograder, timeout, test_timeout,
                           lambda kind, value: connection.send((kind, value)))
        if adopted:
            kernel_bound.end_processes("", set(), adopted=True)
        connection.send(("graded", graded))


def submission_deadline(timeout: float) -> float:
    """The default for how long one submission may take in all: a few cell limits, for the
    regrading a stopped cell costs, and a minute for everything else."""
    return 4 * timeout + 60


@dataclass
class Worker:
    """One process of the class pool, and the submission it is grading, if any."""

    process: Any
    connection: Connection
    job: Path | None = None
    deadline: float = 0.0
    groups: set[int] = field(default_factory=set)
    marks: list[str] = field(default_factory=list)
    where: str = "its first cell"


def grade_in_pool(submissions: list[Path], autograder: Path, workers: int,
                  timeout: float = 300, test_timeout: float = DEFAULT_SECONDS,
                  deadline: float | None = None) -> dict[str, Graded]:
    """Grade submissions in parallel worker processes, one at a time each, with a progress
    bar on stderr; by file stem. A submission still grading ``deadline`` seconds after it
    started has its worker and kernel killed, and its row says what could not be graded."""
    deadline = deadline or submission_deadline(timeout)
    # Spawned, not forked: a fork of a process that holds kernel connections can inherit
    # their sockets, and otter's kernels must start clean.
    spawn = multiprocessing.get_context("spawn")

    def start() -> Worker:
        ours, theirs = spawn.Pipe()
        process = spawn.Process(target=pool_worker, args=(theirs,), daemon=True)
        process.start()
        theirs.close()
        return Worker(process, ours)

    pending, graded = list(submissions), {}
    pool = [start() for _ in range(max(1, min(workers, len(submissions))))]
    try:
        while pending or any(worker.job for worker in pool):
            for worker in pool:
                if worker.job is None and pending:
                    # The deadline starts when the worker starts on it (see take_news).
                    worker.job, worker.deadline = pending.pop(0), math.inf
                    worker.groups, worker.marks, worker.where = set(), [], "its first cell"
                    worker.connection.send((worker.job, autograder, timeout, test_timeout))
            busy = [worker for worker in pool if worker.job is not None]
            first = min(worker.deadline for worker in busy)
            wait([worker.connection for worker in busy] +
                 [worker.process.sentinel for worker in busy],
                 timeout=None if first == math.inf else max(0.0, first - time.monotonic()))
            for index, worker in enumerate(pool):
                row = take_news(worker, deadline)
                if row is not None and worker.job is not None:
                    graded[worker.job.stem] = row
                    worker.job = None
                    if not worker.process.is_alive():
                        pool[index] = start()
                    bar = "#" * (30 * len(graded) // len(submissions))
                    print(f"\r[{bar:.<30}] {len(graded)}/{len(submissions)} graded", end="",
                          file=sys.stderr, flush=True)
    finally:
        for worker in pool:
            stop_worker(worker)
    return {name: graded[name] for name in sorted(graded)}


def take_news(worker: Worker, deadline: float) -> Graded | None:
    """What a busy worker has said, and its submission's row once there is one: graded, or
    stopped at the deadline, or lost with a worker that died."""
    if worker.job is None:
        return None
    try:
        while worker.connection.poll():
            kind, value = worker.connection.recv()
            if kind == "graded":
                return value  # type: ignore[no-any-return]
            if kind == "kernel":
                worker.groups.add(value)
            elif kind == "cell":
                worker.where = value
            elif kind == "mark":
                worker.marks.append(value)
            elif kind == "started":
                worker.deadline = time.monotonic() + deadline
    except (EOFError, OSError):
        pass  # the worker died: said below
    if not worker.process.is_alive():
        stop_worker(worker)
        return Graded({}, cut(f"not graded: the grading process died while running "
                              f"{worker.where}; grade it again"))
    if time.monotonic() > worker.deadline:
        stop_worker(worker)
        return Graded({}, cut(f"not graded: stopped at {deadline:g} s, the limit for one "
                              f"submission (--submission-timeout), while running {worker.where}; "
                              "no question was graded"), seconds=deadline)
    return None


def stop_worker(worker: Worker) -> None:
    """End a worker and everything its submission started (its kernels' process groups)."""
    if worker.process.is_alive() and worker.job is None:
        with contextlib.suppress(OSError):
            worker.connection.send(None)
        worker.process.join(timeout=2)
    if worker.process.is_alive():
        worker.process.kill()
        worker.process.join(timeout=2)
    for mark in worker.marks:
        kernel_bound.end_processes(mark, worker.groups)
    kernel_bound.end_groups(worker.groups)
    worker.connection.close()


def grade_in_containers(submissions: list[Path], autograder: Path, workers: int,
                        assignment: str, timeout: float = 300) -> dict[str, Graded]:
    """Grade submissions with ``otter grade`` in Docker containers, one call per kind of
    file (notebooks, export zips), as it takes one kind per call."""
    scores: dict[str, Graded] = {}
    for ext in sorted({path.suffix.lstrip(".") for path in submissions}):
        paths = [str(path) for path in submissions if path.suffix == f".{ext}"]
        with tempfile.TemporaryDirectory(prefix="agentbook-grade-") as output:
            command = [sys.executable, "-m", "otter", "grade", "-n", assignment,
                       "-a", str(autograder), "-o", output, "--containers", str(workers),
                       "--timeout", str(round(timeout)), "--ext", ext, *paths]
            print(f"otter grade: {len(paths)} .{ext} submissions", file=sys.stderr)
            if subprocess.run(command).returncode != 0:
                raise GradingError("otter grade failed; its report is above")
            scores |= read_otter_grades(Path(output, "final_grades.csv"))
    return {name: scores[name] for name in sorted(scores)}


def read_otter_grades(path: Path) -> dict[str, Graded]:
    """Per-question scores by submission from ``otter grade``'s ``final_grades.csv``."""
    from otter.grade import utils as columns

    summary = {columns.SCORES_DICT_FILE_KEY, columns.SCORES_DICT_TOTAL_POINTS_KEY,
               columns.SCORES_DICT_PERCENT_CORRECT_KEY, columns.SCORES_DICT_GRADING_STATUS_KEY}
    scores: dict[str, Graded] = {}
    with open(path, encoding="utf-8") as file:
        for row in csv.DictReader(file):
            name = row[columns.SCORES_DICT_FILE_KEY]
            if name == columns.POINTS_POSSIBLE_LABEL:
                continue
            status = row[columns.SCORES_DICT_GRADING_STATUS_KEY]
            points = {key: Score(float(value), True, ()) for key, value in row.items()
                      if key not in summary and value != ""}
            scores[Path(name).stem] = Graded(points, "ok" if status == "Completed"
                                             else f"not graded: {status}")
    return scores


def submissions_in(folder: Path) -> list[Path]:
    """Every submission in ``folder``; two files for one student (stem) are refused."""
    found = sorted(path for pattern in ("*.ipynb", "*.zip") for path in folder.glob(pattern))
    if not found:
        raise GradingError(f"no submissions (.ipynb or .zip) in {folder}")
    by_name: dict[str, list[str]] = {}
    for path in found:
        by_name.setdefault(path.stem, []).append(path.name)
    clashes = [" and ".join(names) for names in by_name.values() if len(names) > 1]
    if clashes:
        raise GradingError("two files for one student; keep one of each and run again: "
                           + "; ".join(clashes))
    return found


def read_submission(path: Path) -> nbformat.NotebookNode:
    """The notebook of a submission: the file itself, or the one notebook in an export zip."""
    if path.suffix != ".zip":
        return nbformat.read(path, as_version=4)
    with zipfile.ZipFile(path) as archive:
        names = [name for name in archive.namelist() if name.endswith(".ipynb")]
        if len(names) != 1:
            raise GradingError(f"{path.name}: expected one notebook in the zip; found {names}")
        return nbformat.reads(archive.read(names[0]).decode("utf-8"), as_version=4)


def build_autograder(root: Path, into: Path, assignment: str) -> Path:
    """Build the autograder zip with ``otter assign`` into ``into``; return the zip's path."""
    build(root, autograder=into)
    [archive] = sorted(into.glob(f"{assignment}/*.zip"))
    return archive


def assignment_of_autograder(root: Path, autograder: Path) -> str:
    """The assignment an autograder zip grades: the exercises notebook whose autograded
    questions are exactly the zip's test files."""
    try:
        with zipfile.ZipFile(autograder) as archive:
            tested = {PurePosixPath(name).stem for name in archive.namelist()
                      if name.startswith("tests/") and name.endswith(".py")}
    except (OSError, zipfile.BadZipFile) as error:
        raise GradingError(f"--autograder {autograder}: {error}") from None
    for source in source_notebooks(root):
        questions = question_points(nbformat.read(source, as_version=4))
        if tested == {name for name, (_, manual) in questions.items() if not manual}:
            return source.stem
    raise GradingError(f"--autograder {autograder} tests {len(tested)} questions "
                       f"({', '.join(sorted(tested)[:2])}, ...), and no exercises notebook in "
                       "exercises/source/ asks those; build it again from these sources: "
                       "python -m scripts.course.exercises --autograder build/")


def choose_assignment(root: Path, name: str | None, autograder: Path | None = None) -> Path:
    """The annotated source of the assignment the autograder zip grades, or of the one
    named, or of the only one there is."""
    sources = {path.stem: path for path in source_notebooks(root)}
    if autograder is not None:
        graded = assignment_of_autograder(root, autograder)
        if name not in (None, graded):
            raise GradingError(f"--assignment {name}, but --autograder {autograder} grades "
                               f"{graded}; give the zip of {name}, or leave --assignment out")
        return sources[graded]
    if name in sources:
        return sources[name]
    if name is None and len(sources) == 1:
        return next(iter(sources.values()))
    raise GradingError(f"name the assignment with --assignment, one of: {', '.join(sources)}")


@contextmanager
def quiet_kernels() -> Iterator[None]:
    """Kernels started in here log only errors of their own: each would otherwise warn, once
    a submission, that it talks to the grader over local TCP without encryption. The
    IPython profile they start with is a fresh one, so that none of the grader's own start-up
    files runs in a student's kernel either."""
    with tempfile.TemporaryDirectory(prefix="agentbook-ipython-") as folder:
        profile = Path(folder, "profile_default")
        profile.mkdir()
        # No history database either: kernels starting together would all create it at once.
        settings = {"IPKernelApp": {"log_level": "ERROR"}, "HistoryManager": {"enabled": False}}
        (profile / "ipython_kernel_config.json").write_text(json.dumps(settings),
                                                            encoding="utf-8")
        with patch.dict(os.environ, {"IPYTHONDIR": folder}):
            yield


def submission_of(path: Path, graded: Graded, assignment: Assignment) -> Submission:
    """A graded file with its written answers and the questions it left as handed out."""
    try:
        notebook = read_submission(path)
    except Exception:  # noqa: BLE001 - an unreadable file is named in its grading's status
        return Submission(graded)
    answers = answers_in(notebook, assignment.finder)
    left = unanswered(answers, assignment)
    written = {q.name for q in assignment.questions if q.manual}
    return Submission(with_unanswered(graded, left, assignment),
                      {q: text for q, text in answers.items() if q in written}, left)


def grade_class(args: argparse.Namespace, submissions: list[Path], source: Path) -> dict[
        str, Graded]:
    """Every submission graded, in containers or in a pool of processes, as asked."""
    with tempfile.TemporaryDirectory(prefix="agentbook-autograder-") as scratch, \
            quiet_kernels():
        autograder = args.autograder or build_autograder(args.root, Path(scratch), source.stem)
        use_docker = args.engine == "docker" or (args.engine == "auto" and docker_available())
        workers = max(1, min(args.workers, len(submissions)))
        print(f"grading {len(submissions)} submission{'s' * (len(submissions) != 1)} of "
              f"{source.stem} with {'otter grade (Docker)' if use_docker else 'otter run'}, "
              f"{workers} at a time, each cell within {args.timeout:g} s"
              + ("" if use_docker else f" and each test within {args.test_timeout:g} s"),
              file=sys.stderr)
        if not use_docker and kernel_sandbox.boundary():
            print(f"note: kernels are {kernel_sandbox.boundary()}", file=sys.stderr)
        if use_docker:
            return grade_in_containers(submissions, autograder, workers, source.stem,
                                       args.timeout)
        graded = grade_in_pool(submissions, autograder, workers, args.timeout,
                               args.test_timeout, args.submission_timeout)
        print(file=sys.stderr)
        return graded


def class_command(args: argparse.Namespace) -> int:
    submissions = submissions_in(args.folder.resolve())
    source = choose_assignment(args.root, args.assignment, args.autograder)
    assignment = load_assignment(args.root, source.stem)
    record = Record(source.stem, {})
    if args.update:
        record = load_record(args.output)
        if record.assignment != source.stem:
            raise GradingError(f"{args.output} holds grades of {record.assignment}, not of "
                               f"{source.stem}")
    if args.similarity is not None:
        record.threshold = args.similarity
    students = {path.stem for path in submissions} | set(record.submissions)
    # Marks are checked before anything is graded: a typo costs seconds, not a class's run.
    marks = read_marks(args.written, assignment, students) if args.written else None
    graded = grade_class(args, submissions, source)
    for path in submissions:
        record.submissions[path.stem] = submission_of(path, graded[path.stem], assignment)
    if marks is not None:
        record.marks = marks
    review = write_folder(args.output, record, assignment)
    print(f"wrote {args.output}/: grades.csv, feedback/ (one file per student), "
          + (f"written-answers.html (yours alone: it holds the model answers), {TEMPLATE} "
             "(to fill in), " if assignment.maximum(manual=True) else "") + RECORD)
    return summarize(record, assignment, review)


def summarize(record: Record, assignment: Assignment, review: dict[str, list[str]]) -> int:
    """Say which rows to look at and which to read before posting; 1 when some need a look."""
    rows = record.submissions
    look = {name: sub.graded.status for name, sub in sorted(rows.items())
            if needs_a_look(sub.graded, assignment)}
    clean = [name for name, sub in rows.items() if sub.graded.status == "ok"]
    print(f"{len(clean)} graded cleanly, {len(rows) - len(clean) - len(look)} with notes in "
          f"their status that their feedback explains, {len(look)} to look at"
          f"{':' * bool(look)}", file=sys.stderr)
    for name, status in look.items():
        print(f"  {name}: {status}", file=sys.stderr)
    flagged = {name: flags for name, flags in sorted(review.items()) if flags}
    if flagged:
        print(f"{len(flagged)} flagged for review, never a penalty (the review column; "
              "read the answers side by side in written-answers.html):", file=sys.stderr)
        for name, flags in flagged.items():
            print(f"  {name}: {'; '.join(flags)}", file=sys.stderr)
    return 1 if look else 0


def written_command(args: argparse.Namespace) -> int:
    """Merge written marks into a graded folder, grading nothing again."""
    record = load_record(args.folder)
    assignment = load_assignment(args.root, record.assignment)
    marks_file = args.marks or args.folder / TEMPLATE
    record.marks = read_marks(marks_file, assignment, set(record.submissions))
    write_folder(args.folder, record, assignment)
    unmarked = [name for name in sorted(record.submissions)
                if written_total(record.marks.get(name, {}), assignment) is None]
    print(f"merged {marks_file} into {args.folder}/grades.csv and feedback/, grading nothing "
          f"again: {len(record.submissions) - len(unmarked)} of {len(record.submissions)} "
          "students fully marked")
    if unmarked:
        print(f"not fully marked yet, so their total stays blank: {', '.join(unmarked)}")
    return 0


def answers_command(args: argparse.Namespace) -> int:
    """Write the model-answer notebooks, to hand out once the deadline has passed."""
    names = ([choose_assignment(args.root, args.assignment).stem] if args.assignment
             else [path.stem for path in source_notebooks(args.root)])
    for path in write_model_answers(args.root, names, args.output):
        print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True)
    fixtures = commands.add_parser("fixtures", help="write or check the fixture submissions")
    fixtures.add_argument("--check", action="store_true")
    grade = commands.add_parser("class", help="grade a folder of submissions")
    grade.add_argument("folder", type=Path)
    grade.add_argument("-o", "--output", type=Path, default=Path("grading"),
                       help="the graded folder: grades.csv, feedback/, written-answers.html, "
                       f"{TEMPLATE}, {RECORD} (default: grading)")
    grade.add_argument("--autograder", type=Path,
                       help="the autograder zip, which says which assignment it grades "
                       "(default: build it from the annotated source)")
    grade.add_argument("--assignment", help="the exercises notebook's name, e.g. "
                       "anatomy-exercises (needed without --autograder when there are several)")
    grade.add_argument("--written", type=Path, metavar="CSV",
                       help="written marks to merge: a CSV with a student column and a "
                       "column per written question, or a written column for the total")
    grade.add_argument("--update", action="store_true",
                       help="grade these submissions again into the graded folder -o, keeping "
                       "every other student's row and the written marks")
    grade.add_argument("--similarity", type=float, metavar="SHARE",
                       help="flag a written answer for review when this share of its "
                       "three-word phrases is in the model answer or in another student's "
                       f"(default {THRESHOLD})")
    grade.add_argument("--timeout", type=float, default=300, metavar="SECONDS",
                       help="the longest any one cell may run; a cell stopped costs only "
                       "its own question (default 300)")
    grade.add_argument("--test-timeout", type=float, default=DEFAULT_SECONDS,
                       metavar="SECONDS", help="the longest any one test may run; a test "
                       "stopped fails with a message naming the call that did not finish "
                       f"(default {DEFAULT_SECONDS}, built into the tests; in Docker always that)")
    grade.add_argument("--submission-timeout", type=float, metavar="SECONDS",
                       help="the longest one submission may take in all, regrading "
                       "included; past it, it is stopped and not graded (default: four "
                       "times --timeout, and a minute)")
    grade.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    grade.add_argument("--engine", choices=("auto", "docker", "process"), default="auto",
                       help="auto uses Docker where it runs, otherwise a process pool")
    written = commands.add_parser("written", help="merge written marks into a graded folder, "
                                  "grading nothing again")
    written.add_argument("folder", type=Path, help="the graded folder, e.g. grading")
    written.add_argument("--marks", type=Path, metavar="CSV",
                         help=f"the marks (default: {TEMPLATE} in the graded folder)")
    answers = commands.add_parser("answers", help="write the model-answer notebooks, to hand "
                                  "out after the deadline")
    answers.add_argument("-o", "--output", type=Path, default=Path("answers"),
                         help="the folder to write NAME-answers.ipynb into (default: answers)")
    answers.add_argument("--assignment", help="only this exercises notebook, e.g. "
                         "anatomy-exercises (default: every one)")
    args = parser.parse_args(argv)
    args.root = args.root.resolve()
    try:
        if args.command == "fixtures":
            return sync(args.root, fixture_files(args.root), committed_fixtures(args.root),
                        args.check, "fixture submissions", "python -m scripts.course.grading "
                        "fixtures")
        command = {"class": class_command, "written": written_command,
                   "answers": answers_command}[args.command]
        return command(args)
    except (GradingError, ExercisesError, MarksError, FileNotFoundError) as error:
        print(error, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
