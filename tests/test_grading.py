"""Grading the exercises as an instructor does, on submissions kept as fixtures.

The autograder zips are built with ``otter assign`` once per run. The correct solutions, a
class of broken and hostile submissions, and Gradescope's layout are graded as otter grades
them, each submission in a kernel of its own: the correct solution scores full marks on every
public and hidden test (the proof that every reference solution passes its own tests, so the
build skips otter's own run of them), every hang costs only its own question within the
limits, no process outlives the grading, a submission that changes the grader is not scored
and is flagged, and no line of a hidden test reaches a student. Each hostile fixture is graded
on one of the two paths (ON_GRADESCOPE says which), as both bound a kernel with the same code
(the hang in C code only in the full suite, for its cost);
``python -m scripts.checks.bench hostile`` grades every one on both. The plausible wrong answers
and the unanswered notebooks are graded in this process, through otter's own test runner
(``grade_in_process``), which is quicker: each loses points on its own question, is caught
by a public test there, and loses nothing anywhere else.
"""

from __future__ import annotations

import ast
import contextlib
import csv
import dataclasses
import hashlib
import importlib.metadata
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
import zipfile
from pathlib import Path
from typing import Any

import nbformat
import pytest
import yaml

from scripts.course import integrity, kernel_bound
from scripts.course.exercises import (
    ZipLimits,
    build,
    committed_files,
    diff,
    pack_autograder,
    unpack_tests,
)
from scripts.course.grading import (
    FIXTURES_DIR,
    HOSTILE_ANSWERS,
    WRONG_ANSWERS,
    Graded,
    GradingError,
    Score,
    committed_fixtures,
    fixture_files,
    fixtures_folder,
    grade_in_pool,
    grade_one,
    graded_from,
    model_answers,
    question_points,
    read_otter_grades,
    solution_code,
    wrong_answer_name,
    write_scores,
)
from scripts.course.grading import main as grading_main
from scripts.course.run_otter import (
    SETTINGS_FILE,
    Session,
    Settings,
    cell_name,
    checked_results,
    clean_messages,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
SOURCE = REPO_ROOT / "exercises" / "source" / "anatomy-exercises.ipynb"
STUDENT = REPO_ROOT / "exercises" / "anatomy-exercises.ipynb"
PUBLIC_TESTS = REPO_ROOT / "exercises" / "tests"
FIXTURES = REPO_ROOT / FIXTURES_DIR
# Every assignment, one per chapter with exercises: anatomy-exercises.ipynb is "anatomy".
ASSIGNMENTS = ("anatomy", "durable", "untrusted", "protocols")
# Wrong answers that break grading itself: a function that never returns when a test calls it
# (graded by the class command), and a cell that kills the kernel (by the class command and on
# Gradescope's layout); never in this process.
LOOPING, DYING = "wrong-q5a-never-returns", "wrong-q4c-exits-the-kernel"
KERNEL_ONLY = {LOOPING, DYING}
HOSTILE = {f"hostile-{hostile.slug}": hostile for hostile in HOSTILE_ANSWERS}
# Each hostile fixture is graded on one path, where what it attacks differs between the paths,
# to keep the suite short: both paths bound a kernel with the same code (run_otter.py,
# kernel_bound.py). Gradescope's layout takes a hang in C code and the replaced test call (its
# "Not scored" and "Flagged for review" entries) and the one that leaves processes behind
# (its escapee is found only by its command line: one run at a time may look for it); the
# class command every other.
ON_GRADESCOPE = {"hostile-c-call-never-returns", "hostile-replaces-the-test-call",
                 "hostile-leaves-processes-behind"}
IN_CLASS = {name: hostile for name, hostile in HOSTILE.items() if name not in ON_GRADESCOPE}
# The hostile fixtures whose function hangs when a hidden test calls it, and the question.
HANGS = {f"hostile-{slug}": "anatomy_q5a" for slug in (
    "c-call-never-returns", "ignores-signals", "swallows-everything")}
# The limits the class and Gradescope's layout grade with here: short, so that the hangs cost
# little time; an interrupted kernel gets a second (AGENTBOOK_GRACE_SECONDS) before it is killed.
CELL_SECONDS, TEST_SECONDS, GRACE_SECONDS = 6, 1, "1"
# What the hostile fixtures start, found by what they carry: the environment every process of
# the grading inherits (SENTINEL, set here), or the command line of the one that leaves it.
SENTINEL = "AGENTBOOK_TEST_SENTINEL"
ESCAPED = b"sleep\x0086123\x00"
PAYLOAD_RAN = Path("/tmp/agentbook-hostile-payload-ran")  # what forges-the-results tries to make
# The student files, Chapter 1's autograder zip, and every assignment's zip by name.
Built = tuple[dict[str, str], Path, dict[str, Path]]


def source_of(assignment: str) -> Path:
    return REPO_ROOT / "exercises" / "source" / f"{assignment}-exercises.ipynb"


def autograded_points(assignment: str = "anatomy") -> dict[str, float]:
    questions = question_points(nbformat.read(source_of(assignment), as_version=4))
    return {name: points for name, (points, manual) in questions.items() if not manual}


def assignment_of(question: str) -> str:
    return question.split("_q")[0]


# What `otter assign`'s output depends on: the annotated sources, the code that builds and
# packs them (scripts/course/, and the helpers it takes from scripts/build/), the pinned
# releases of otter, nbformat and the rest, and Python's.
BUILD_INPUTS = ("exercises/source", "scripts/course", "scripts/build", "requirements.txt",
                "requirements-dev.txt")
BUILD_CACHE = REPO_ROOT / ".cache" / "autograder"


def build_inputs_digest() -> str:
    digest = hashlib.sha256(f"{importlib.metadata.version('otter-grader')} {sys.version}".encode())
    for name in BUILD_INPUTS:
        top = REPO_ROOT / name
        for path in sorted(p for p in [top, *top.rglob("*")] if p.is_file()
                           and "__pycache__" not in p.parts):
            digest.update(path.relative_to(REPO_ROOT).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()


def build_once(folder: Path) -> None:
    """Fill ``folder`` with what ``otter assign`` builds: the student files (as JSON) and each
    assignment's autograder zip. The build takes about 8 s, so it is kept in .cache/ under a
    digest of its inputs and made again only when one of them changed; a run after set-up
    that changed none of them copies it."""
    cached = BUILD_CACHE / build_inputs_digest()
    if not (cached / "student-files.json").is_file():
        BUILD_CACHE.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=BUILD_CACHE, prefix="building-"))
        files = build(REPO_ROOT, autograder=scratch, check_solutions=False)
        (scratch / "student-files.json").write_text(json.dumps(files), encoding="utf-8")
        for old in BUILD_CACHE.iterdir():  # the builds of other inputs
            if not old.name.startswith("building-"):
                shutil.rmtree(old, ignore_errors=True)
        try:
            scratch.rename(cached)
        except OSError:  # another run of the suite, at the same time, was first
            shutil.rmtree(scratch)
    shutil.copytree(cached, folder, dirs_exist_ok=True)


@pytest.fixture(scope="session")
def built(made_once: Any) -> Built:
    """The student files and the autograder zip, from one run of ``otter assign``.

    Otter's check that the solutions pass every test is skipped here: grading the correct
    fixture below checks exactly that, against this zip, and grading is the slow part.
    """
    folder = made_once("autograder", build_once)
    files = json.loads((folder / "student-files.json").read_text(encoding="utf-8"))
    archives = {assignment: next((folder / f"{assignment}-exercises").glob("*.zip"))
                for assignment in ASSIGNMENTS}
    return files, archives["anatomy"], archives


def fixture(name: str, assignment: str = "anatomy") -> Path:
    return REPO_ROOT / fixtures_folder(assignment) / f"{name}.ipynb"


def zip_tests(archive: Path) -> dict[str, str]:
    """The test files in an autograder zip, hidden tests included: path -> text."""
    with zipfile.ZipFile(archive) as opened:
        return {name: opened.read(name).decode("utf-8") for name in opened.namelist()
                if name.startswith("tests/") and name.endswith(".py")}


def grade_in_process(path: Path, archive: Path, folder: Path) -> Graded:
    """A submission graded as otter grades it, but in this process and without a kernel:
    each code cell runs in one namespace, in order, with otter in grading mode, so that each
    ``grader.check`` runs that question's tests (hidden ones included) by otter's own
    Checker where the notebook calls it; then every test not yet run, as otter's last cell
    does. Only for the fixtures that mean no harm: the kernel path is ``grade_one``."""
    from otter.check.notebook import Notebook
    from otter.execute import Checker
    from otter.test_files import GradingResults

    tests = zip_tests(archive)
    (folder / "tests").mkdir(parents=True)
    for name, text in tests.items():
        (folder / name).write_text(text, encoding="utf-8")
    notebook = nbformat.read(path, as_version=4)
    environment: dict[str, Any] = {"__name__": "__main__"}
    cwd = os.getcwd()
    os.chdir(folder)
    Notebook.init_grading_mode(str(folder / "tests"))
    try:
        for cell in notebook.cells:
            if cell.cell_type == "code":
                try:
                    exec(compile(cell.source, f"<cell {cell.id}>", "exec"), environment)
                except Exception as error:  # as the kernel reports it, in the cell's outputs
                    cell.outputs = [nbformat.v4.new_output(
                        "error", ename=type(error).__name__, evalue=str(error), traceback=[])]
        for test in sorted(tests):
            Checker.check_if_not_already_checked(str(folder / test), environment)
        results = GradingResults(Checker.get_results())
    finally:
        os.chdir(cwd)
        Notebook._grading_mode, Notebook._tests_dir_override = False, None
        Checker.disable_tracking()
        Checker.clear_results()
        if "matplotlib.pyplot" in sys.modules:
            sys.modules["matplotlib.pyplot"].close("all")
    results.notebook = notebook
    secrets = integrity.Secrets.of(tests.values())
    clean_messages(results, secrets)
    return graded_from(results, secrets)


def hidden_lines(archive: Path) -> set[str]:
    """Every line of a hidden test long enough to mean something that no public test has too,
    from the zip."""
    hidden, public = set(), set()
    for text in zip_tests(archive).values():
        source = text.splitlines()
        spans = [range(node.lineno, (node.end_lineno or node.lineno) + 1)
                 for node in integrity.hidden_tests(text)]
        for number, line in enumerate(source, 1):
            (hidden if any(number in span for span in spans) else public).add(line.strip())
    return {line for line in hidden - public if len(line) >= 20}


def leaked(text: str, archive: Path) -> list[str]:
    """The hidden tests' lines and runs of words that ``text`` holds: none may."""
    secrets = integrity.Secrets.of(zip_tests(archive).values())
    return ([line for line in hidden_lines(archive) if line in text]
            + [" ".join(window) for window in integrity.windows(text)
               if window in secrets.windows])


def escapees() -> set[int]:
    """The processes that look like the one hostile-leaves-processes-behind leaves: it has no
    environment to carry a sentinel, so only its command line tells it."""
    found = set()
    for pid, _ in kernel_bound.processes():
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes() == ESCAPED:
                found.add(pid)
    return found


def left_running(sentinel: str, escapees_before: set[int] | None = None) -> list[str]:
    """The processes still running that a grading started: they carry ``sentinel`` in their
    environment; with ``escapees_before`` (those running before it started), also a new one
    that looks like hostile-leaves-processes-behind's. Only the run that grades that fixture
    looks for it, so that no other test's run, or another's on a shared machine, is blamed."""
    found = []
    for pid, _ in kernel_bound.processes():
        try:
            environment = Path(f"/proc/{pid}/environ").read_bytes()
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if pid == os.getpid() or b"multiprocessing.resource_tracker" in command:
            continue  # this process, and the helper of its pool that ends with it
        if f"{SENTINEL}={sentinel}".encode() in environment.split(b"\0"):
            found.append(f"{pid}: {command[:80]!r}")
    if escapees_before is not None:
        found += [f"{pid}: {ESCAPED!r}" for pid in escapees() - escapees_before]
    return found


def grader_flags(review: str) -> list[str]:
    """The flags of a review column that the grader's own checks raised (integrity.py), not
    the similarity of written answers (similarity.py: "like ...")."""
    return [flag for flag in review.split("; ") if flag and not flag.startswith("like ")]


def earned(name: str, scores: dict[str, float], costs: str, assignment: str = "anatomy") -> None:
    """A submission's points, as a hostile fixture's `costs` says: every question but the
    one it costs keeps full marks; `everything` means nothing at all."""
    maximum = autograded_points(assignment)
    if costs == "everything":
        assert sum(scores.values()) == 0, (name, scores)
        return
    kept = {q: p for q, p in maximum.items() if q != costs}
    assert {q: scores.get(q, 0.0) for q in kept} == kept, (name, scores)
    if costs != "nothing":
        assert scores.get(costs, 0.0) < maximum[costs], (name, scores)


# ---------------------------------------------------------------------------------------------
# The build and the fixtures are current


def test_committed_student_version_is_current(built: Built) -> None:
    # That every reference solution passes its tests is checked by grading the correct fixture.
    files = built[0]
    stale = diff(committed_files(REPO_ROOT, files), files)
    assert not stale, "run `python -m scripts.course.exercises` and commit the result\n" + stale


def test_fixture_submissions_are_current() -> None:
    stale = diff(committed_fixtures(REPO_ROOT), fixture_files(REPO_ROOT))
    assert not stale, ("run `python -m scripts.course.grading fixtures` and commit the "
                       "result\n" + stale)


def test_every_autograded_question_has_a_wrong_answer_fixture() -> None:
    assert {wrong.question for wrong in WRONG_ANSWERS} == {
        question for assignment in ASSIGNMENTS for question in autograded_points(assignment)}
    names = [wrong_answer_name(wrong) for wrong in WRONG_ANSWERS]
    assert len(set(names)) == len(names)


def test_a_wrong_answer_whose_text_is_gone_is_reported(tmp_path: Path) -> None:
    from scripts.course.grading import WrongAnswer, with_wrong_answer

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1", id="a")])
    missing = WrongAnswer("anatomy_q1b", "gone", "a", (("x = 2", "x = 3"),))
    with pytest.raises(GradingError, match="wrong-q1b-gone"):
        with_wrong_answer(notebook, missing)


def test_a_wrong_answer_to_no_existing_assignment_or_question_is_an_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(REPO_ROOT / "exercises" / "source", tmp_path / "exercises" / "source")
    wrong = tmp_path / "exercises" / "source" / "wrong-answers.yml"
    entries = yaml.safe_load(wrong.read_text())
    for question, expected in (
            ("anatomyy_q1b", "is for anatomyy_q1b, but no assignment anatomyy; there are: "
                             "anatomy, durable, protocols, untrusted"),
            ("anatomy_q9z", "is for anatomy_q9z, but assignment anatomy has no question "
                            "anatomy_q9z")):
        wrong.write_text(yaml.safe_dump([*entries, {**entries[0], "question": question}]))
        assert grading_main(["--root", str(tmp_path), "fixtures", "--check"]) == 2
        assert expected in capsys.readouterr().err


def test_solution_markers_are_removed_from_a_correct_answer() -> None:
    source = ('# BEGIN SOLUTION NO PROMPT\nx = 1\n# END SOLUTION\n""" # BEGIN PROMPT\nx = ...\n'
              '"""  # END PROMPT\ny = x + 1  # SOLUTION\n')
    assert solution_code(source) == "x = 1\ny = x + 1"


# ---------------------------------------------------------------------------------------------
# The grading table, through otter's test runner in this process


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_correct_submission_scores_full_marks(
        built: Built, assignment: str, tmp_path: Path) -> None:
    # The proof that every reference solution passes its public and hidden tests, which
    # `otter assign` would otherwise check. In a kernel, the class command grades Chapter 1's
    # correct submission in tests/test_instructors.py; here, every other fixture of the class
    # below keeps its points on every question it does not break.
    scores = grade_in_process(fixture("correct", assignment), built[2][assignment],
                              tmp_path).scores
    assert {question: score.points for question, score in scores.items()} == (
        autograded_points(assignment))
    assert all(score.public_passed for score in scores.values())


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_unanswered_notebook_scores_nothing_and_says_so(
        built: Built, assignment: str, tmp_path: Path) -> None:
    unanswered = grade_in_process(fixture("unanswered", assignment), built[2][assignment],
                                  tmp_path).scores
    assert {question: score.points for question, score in unanswered.items()} == dict.fromkeys(
        autograded_points(assignment), 0.0)
    for question, score in unanswered.items():
        assert not score.public_passed, question
        # Every failing public test says so, not just the first: no internal error shows.
        assert score.public_messages and all(
            "not answered yet" in message for message in score.public_messages), (
            question, score.public_messages)


@pytest.mark.parametrize("wrong", [wrong for wrong in WRONG_ANSWERS
                                   if wrong_answer_name(wrong) not in KERNEL_ONLY],
                         ids=wrong_answer_name)
def test_a_wrong_answer_loses_points_on_its_own_question_and_no_other(
        built: Built, wrong: Any, tmp_path: Path) -> None:
    assignment = assignment_of(wrong.question)
    scores = grade_in_process(fixture(wrong_answer_name(wrong), assignment),
                              built[2][assignment], tmp_path).scores
    maximum = autograded_points(assignment)
    own = scores[wrong.question]
    assert own.points < maximum[wrong.question], "the hidden tests missed it too"
    assert not own.public_passed, "the public tests, a student's only feedback, missed it"
    assert all(message.startswith("expected") or "expected " in message
               for message in own.public_messages), own.public_messages
    # A failed hidden test says what it checks, never how: no line of its source.
    assert all(message.startswith("Hidden test: checks") and "assert" not in message
               for message in own.hidden_messages), own.hidden_messages
    others = {question: score.points for question, score in scores.items()
              if question != wrong.question}
    assert others == {question: maximum[question] for question in others}


class OtterResults:
    """What ``otter grade`` reads from each submission's GradingResults to write its CSV."""

    def __init__(self, file: str, scores: dict[str, float], error: str | None = None) -> None:
        self.file, self.scores, self.catastrophic_error = file, scores, error

    def has_catastrophic_failure(self) -> bool:
        return self.catastrophic_error is not None

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {name: {"score": score, "possible": 1.0} for name, score in self.scores.items()}

    possible = property(lambda self: float(len(self.scores)))
    total = property(lambda self: sum(self.scores.values()))
    percent = property(lambda self: self.total / self.possible if self.scores else 0.0)


def otter_grades_csv(folder: Path, results: list[OtterResults]) -> Path:
    """A final_grades.csv written by otter's own code, as ``otter grade`` writes it."""
    from otter.grade.utils import merge_scores_to_df

    path = folder / "final_grades.csv"
    merge_scores_to_df(results).to_csv(path, index=False)  # type: ignore[arg-type]
    return path


def test_the_grades_otter_grade_writes_are_read_per_question(tmp_path: Path) -> None:
    path = otter_grades_csv(tmp_path, [OtterResults("ana.ipynb", {"q1": 1.0, "q2": 0.5}),
                                       OtterResults("bo.zip", {"q1": 0.0, "q2": 1.0})])
    grades = read_otter_grades(path)
    assert {name: {q: s.points for q, s in row.scores.items()} for name, row in grades.items()
            } == {"ana": {"q1": 1.0, "q2": 0.5}, "bo": {"q1": 0.0, "q2": 1.0}}


def test_a_submission_otter_grade_could_not_grade_is_named(tmp_path: Path) -> None:
    path = otter_grades_csv(tmp_path, [OtterResults("ana.ipynb", {"q1": 1.0}),
                                       OtterResults("bo.ipynb", {}, error="kernel died")])
    grades = read_otter_grades(path)
    assert (grades["ana"].status, grades["bo"].status) == ("ok", "not graded: kernel died")


def test_class_grading_in_containers_calls_otter_grade_once_per_kind_of_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No Docker here: a stand-in for `otter grade` checks its command line and writes the CSV
    # otter would, for the files it was given.
    import scripts.course.grading as grading

    calls: list[list[str]] = []

    def otter_grade(command: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        assert command[2:5] == ["otter", "grade", "-n"], command
        output = Path(command[command.index("-o") + 1])
        files = command[command.index("--ext") + 2:]
        otter_grades_csv(output, [OtterResults(Path(f).name, {"q1": 1.0}) for f in files])
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(grading.subprocess, "run", otter_grade)
    submissions = [tmp_path / "ana.ipynb", tmp_path / "bo.zip", tmp_path / "cy.ipynb"]
    scores = grading.grade_in_containers(submissions, tmp_path / "autograder.zip", 3, "hw")
    assert {name: row.scores["q1"].points for name, row in scores.items()} == {
        "ana": 1.0, "bo": 1.0, "cy": 1.0}
    assert [command[command.index("--ext") + 1] for command in calls] == ["ipynb", "zip"]
    assert all(command[command.index("--containers") + 1] == "3" for command in calls)


def test_scores_are_written_one_row_per_submission(tmp_path: Path) -> None:
    path = tmp_path / "grades.csv"
    write_scores(path, {"ana": Graded({"q2": Score(1.0, True, ()), "q1": Score(2 / 3, False, ())}),
                        "bo": Graded({}, "unreadable: not JSON"),
                        "cy": Graded({}, "not scored: x")},
                 {"q1": 1.0, "q2": 1.0}, 3.0, {"ana": 2.5},
                 {"bo": ["like the model answer"], "cy": ["cell a imports otter", "b"]})
    # The total stays blank until the written answers are marked.
    assert path.read_text().splitlines() == [
        "student,q1,q2,autograded,written,total,status,review",
        "points possible,1.00,1.00,2.00,3.00,5.00,,", "ana,0.67,1.00,1.67,2.50,4.17,ok,",
        "bo,0.00,0.00,0.00,,,unreadable: not JSON,like the model answer",
        "cy,0.00,0.00,0.00,,,not scored: x,cell a imports otter; b"]


# ---------------------------------------------------------------------------------------------
# The autograder's environment


def third_party_imports(code: str) -> set[str]:
    """The top-level modules a piece of code imports, leaving out the standard library."""
    modules: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.add(node.module.split(".")[0])
    return {module for module in modules if module not in sys.stdlib_module_names}


def distribution_names(module: str) -> set[str]:
    names = importlib.metadata.packages_distributions().get(module, [module])
    return {re.sub(r"[-_.]+", "-", name).lower() for name in names}


def requirement_name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[\s@=<>!~\[;]", requirement, maxsplit=1)[0]).lower()


def test_the_autograder_installs_everything_the_tests_and_solutions_import(
        built: Built) -> None:
    source = nbformat.read(SOURCE, as_version=4)
    code = "\n".join(solution_code(cell.source) for cell in source.cells
                     if cell.cell_type == "code")
    # otter-grader itself is installed in every autograder, and with it what it depends on.
    otter = importlib.metadata.requires("otter-grader") or []
    provided = {"otter-grader"} | {requirement_name(entry) for entry in otter
                                   if "extra ==" not in entry}
    config = yaml.safe_load(source.cells[0].source)
    required = {requirement_name(entry): entry for entry in config["requirements"]}
    assert "matplotlib" in third_party_imports(code), "the derivation must see the plot's import"
    for module in sorted(third_party_imports(code)):
        names = distribution_names(module)
        assert names & (set(required) | provided), f"{module} is not in the autograder"
    for name, entry in required.items():
        assert "==" in entry or " @ " in entry, f"{entry} is not pinned"
        if "==" in entry:
            assert entry == f"{name}=={importlib.metadata.version(name)}", (
                f"{entry} differs from the version the book pins")
    with zipfile.ZipFile(built[1]) as archive:
        environment = yaml.safe_load(archive.read("environment.yml"))
    pip = next(entry["pip"] for entry in environment["dependencies"] if isinstance(entry, dict))
    assert set(config["requirements"]) <= set(pip), pip


# ---------------------------------------------------------------------------------------------
# Checks that work wherever the notebook is opened, and written answers that reach a grader


def code_cell(notebook_path: Path, cell_id: str) -> str:
    notebook = nbformat.read(notebook_path, as_version=4)
    [source] = [cell.source for cell in notebook.cells if cell.id == cell_id]
    return source


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_student_notebook_carries_exactly_its_public_tests(assignment: str) -> None:
    namespace: dict[str, Any] = {}
    setup = code_cell(REPO_ROOT / "exercises" / f"{assignment}-exercises.ipynb", "public-tests")
    exec(setup.split("\nbundled = ")[0], namespace)  # only the constant, nothing written
    bundled = unpack_tests(namespace["PUBLIC_TESTS"])
    shipped = {path.name: path.read_text(encoding="utf-8")
               for path in PUBLIC_TESTS.glob(f"{assignment}_*.py")}
    assert bundled == shipped and shipped


def test_a_downloaded_copy_checks_its_answers_without_the_repository(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import otter

    shutil.copy(STUDENT, tmp_path / STUDENT.name)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "anatomy_q1b.py").write_text("# the copy beside the notebook wins\n")
    monkeypatch.chdir(tmp_path)
    exec(code_cell(STUDENT, "public-tests"), {})
    written = sorted(path.name for path in (tmp_path / "tests").glob("*.py"))
    assert written == sorted(path.name for path in PUBLIC_TESTS.glob("anatomy_*.py"))
    assert (tmp_path / "tests" / "anatomy_q1b.py").read_text().startswith("# the copy")
    grader = otter.Notebook()
    environment: dict[str, Any] = {}
    exec("from typing import Any\nfrom collections.abc import Mapping\n"
         "from agentbook import AUTO_REFUND_LIMIT_CENTS, Gate, ToolCall\n"
         + solution_code(code_cell(SOURCE, "q7b-code")), environment)
    assert grader.check("anatomy_q7b", environment).passed_all_public
    environment["make_config_gate"] = lambda config: None
    result = grader.check("anatomy_q7b", environment)
    assert not result.passed_all_public and "not answered yet" in str(result)


def test_the_hand_in_cell_exports_the_written_answers_for_a_grader(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import otter

    shutil.copy(FIXTURES / "correct.ipynb", tmp_path / STUDENT.name)
    shutil.copytree(PUBLIC_TESTS, tmp_path / "tests")
    monkeypatch.chdir(tmp_path)
    exec(code_cell(STUDENT, "export"), {"sys": sys, "os": os, "grader": otter.Notebook()})
    [export] = list(tmp_path.glob("*.zip"))
    with zipfile.ZipFile(export) as archive:
        names = archive.namelist()
        [page] = [name for name in names if name.endswith(".html")]
        text = archive.read(page).decode("utf-8")
    assert STUDENT.name in names
    answers = model_answers(nbformat.read(SOURCE, as_version=4))
    manual = [name for name, (_, is_manual) in question_points(
        nbformat.read(SOURCE, as_version=4)).items() if is_manual]
    assert len(answers) == len(manual)
    for answer in answers.values():
        words = re.findall(r"[A-Za-z]+(?: [A-Za-z]+){4}", answer.replace("Model answer", ""))
        assert words and words[0] in text, f"missing from the page: {words[:1]}"


# ---------------------------------------------------------------------------------------------
# A real class: one bad or hostile file never costs the others


def small_submission(*sources: str) -> str:
    """A short notebook: a few cells and the check cells otter grades them by."""
    return nbformat.writes(nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(source) for source in sources]))


HANG_STATUS = ("{}: a hidden test did not finish within " f"{TEST_SECONDS} s, even when "
               "interrupted, so grading stopped it")


def test_a_class_with_hangs_tampering_leaks_a_typo_a_corrupt_file_and_a_dead_kernel_is_graded(
        built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The hostile fixtures and the function that never returns beside short broken notebooks,
    # which keep this cheap: a kernel each. Each loses points only where it breaks something.
    q7b = ("from typing import Any\nfrom collections.abc import Mapping\n"
           "from agentbook import AUTO_REFUND_LIMIT_CENTS, Gate, ToolCall\n"
           + solution_code(code_cell(SOURCE, "q7b-code")))
    folder = tmp_path / "class"
    folder.mkdir()
    for name in (LOOPING, *IN_CLASS):
        shutil.copy(fixture(name), folder)
    (folder / "loops.ipynb").write_text(small_submission(
        q7b, 'grader.check("anatomy_q7b")', "import time\n\nwhile True:\n    time.sleep(1)",
        'grader.check("anatomy_q5a")', "x = (", 'grader.check("anatomy_q4c")'))
    # Killed in one cell, after an answer that keeps its points (killed too often: below).
    (folder / "dies.ipynb").write_text(small_submission(
        q7b, 'grader.check("anatomy_q7b")', "import os\nos._exit(1)"))
    # A cell that ignores the interrupt its limit sends: its kernel is killed.
    (folder / "deaf.ipynb").write_text(small_submission(
        q7b, 'grader.check("anatomy_q7b")',
        "import signal\nimport time\n\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "time.sleep(10**6)", 'grader.check("anatomy_q5a")'))
    (folder / "page.ipynb").write_text("<!DOCTYPE html><html><body>Not found</body></html>")
    written = tmp_path / "written.csv"
    written.write_text(f"student,written\n{LOOPING},12.5\n")
    sentinel = uuid.uuid4().hex
    monkeypatch.setenv(SENTINEL, sentinel)  # the workers, their kernels and what they start
    monkeypatch.setenv("AGENTBOOK_GRACE_SECONDS", GRACE_SECONDS)
    PAYLOAD_RAN.unlink(missing_ok=True)
    status = grading_main(["class", str(folder), "-o", str(tmp_path / "out"), "--timeout",
                           str(CELL_SECONDS), "--test-timeout", str(TEST_SECONDS),
                           "--autograder", str(built[1]), "--workers", "2",
                           "--engine", "process", "--written", str(written),
                           "--assignment", "anatomy-exercises"])
    assert status == 1  # the summary names the files with problems
    assert not left_running(sentinel), "grading left processes running"
    assert not PAYLOAD_RAN.exists(), "the grader loaded a pickle that ran a command"
    rows = {row["student"]: row for row in csv.DictReader(
        (tmp_path / "out/grades.csv").open(encoding="utf-8"))}
    assert list(rows) == ["points possible", "deaf", "dies", *sorted(IN_CLASS),
                          "loops", "page", LOOPING]
    maximum = autograded_points()
    assert all(points > 0 for points in maximum.values())
    scores = {question: f"{points:.2f}" for question, points in maximum.items()}
    assert rows["points possible"] == {
        "student": "points possible", **scores, "autograded": f"{sum(maximum.values()):.2f}",
        "written": "15.00", "total": f"{sum(maximum.values()) + 15:.2f}", "status": "",
        "review": ""}
    auto = float(rows[LOOPING]["autograded"])
    assert (rows[LOOPING]["written"], rows[LOOPING]["total"]) == ("12.50", f"{auto + 12.5:.2f}")
    # Its written answers are the model answers, as are its classmates': flagged for that
    # alone (similarity.py), never for its code.
    assert rows[LOOPING]["review"].startswith("like the model answer in every written "
                                              "question (100%)")
    assert (rows["loops"]["anatomy_q7b"], rows["loops"]["anatomy_q5a"]) == ("2.00", "0.00")
    assert rows["loops"]["status"].startswith("anatomy_q5a: cell")
    assert "time limit" in rows["loops"]["status"]
    # The cell that killed the kernel is named, and the answer before it keeps its points.
    assert re.match(r"cell \w+: the kernel died there; graded again with that cell raising "
                    "an error", rows["dies"]["status"]), rows["dies"]["status"]
    assert rows["dies"]["anatomy_q7b"] == "2.00"
    assert re.match(rf"cell \w+: ran past its {CELL_SECONDS} s limit and ignored the interrupt; "
                    "graded again with that cell raising an error", rows["deaf"]["status"]), (
        rows["deaf"]["status"])
    assert (rows["deaf"]["anatomy_q7b"], rows["deaf"]["anatomy_q5a"]) == ("2.00", "0.00")
    # The function that never returns costs its own question only, and says where it hung.
    earned(LOOPING, {q: float(rows[LOOPING][q]) for q in maximum}, "anatomy_q5a")
    assert rows[LOOPING]["status"] == (
        f"anatomy_q5a: calling receipt_liar() did not finish within {TEST_SECONDS} s "
        "(test test_q5a_every_call_returns_a_fresh_model); anatomy_q5a: calling receipt_liar() "
        f"did not finish within {TEST_SECONDS} s (a hidden test)")
    looping_feedback = (tmp_path / "out/feedback" / f"{LOOPING}.txt").read_text()
    assert f"receipt_liar() did not finish within {TEST_SECONDS} s" in looping_feedback
    assert "test_q5a_fresh_copies" not in looping_feedback and "of 19.00" in looping_feedback
    assert rows["page"]["status"].startswith("unreadable: NotJSONError")
    assert (rows["page"]["autograded"], rows["page"]["total"]) == ("0.00", "")
    # A cell that raised is named, not the symptom a later test saw.
    assert "anatomy_q4c: cell" in rows["loops"]["status"]
    assert "raised SyntaxError" in rows["loops"]["status"]
    feedback = (tmp_path / "out/feedback/loops.txt").read_text()
    q4c = feedback.split("\nanatomy_q4c:")[1].split("\nanatomy_")[0]
    assert "raised SyntaxError" in q4c and "test" in q4c and "NoneType" not in q4c
    assert "anatomy_q3b: 3.00 of 3.00" in looping_feedback
    assert "Model answer" in (tmp_path / "out/written-answers.html").read_text()
    # Every hostile submission: each hang costs its own question, within the limits, and says
    # so; one that changes the grader scores nothing and is flagged; nothing hidden leaks.
    for name, hostile in IN_CLASS.items():
        row = rows[name]
        earned(name, {q: float(row[q]) for q in maximum}, hostile.costs)
        if hostile.costs == "everything":
            assert "not scored: its code changed the grader's runner" in row["status"], name
            assert grader_flags(row["review"]), name
        text = (tmp_path / "out/feedback" / f"{name}.txt").read_text() + json.dumps(row)
        assert not leaked(text, built[1]), name
    for name, question in HANGS.items():
        if name in IN_CLASS:
            assert rows[name]["status"] == HANG_STATUS.format(question), name
    reads = rows["hostile-reads-the-hidden-tests"]
    assert "[hidden test text]" in reads["status"]
    forged = rows["hostile-forges-the-results"]["status"]
    assert all(part in forged for part in ("otter's test files (run)", "the time limit "
                                           "(setitimer)", "the result writer (dump)")), forged
    assert not grader_flags(rows[LOOPING]["review"])
    assert grader_flags(rows["hostile-reads-the-hidden-tests"]["review"])
    # The quicker grading in this process, which the wrong answers get, grades as the kernel.
    quick = grade_in_process(fixture("hostile-reads-the-hidden-tests"), built[1],
                             tmp_path / "in-process")
    assert {q: f"{score.points:.2f}" for q, score in quick.scores.items()} == {
        q: reads[q] for q in maximum}
    assert quick.status == reads["status"]


def test_a_submission_past_its_deadline_is_stopped_and_its_worker_ended(
        built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        full_suite: None) -> None:
    # Every cell within its limit, the whole past the submission's: the pool's own deadline.
    # One worker: first a file with no notebook in it, graded, then the slow one.
    page = tmp_path / "page.ipynb"
    page.write_text("not a notebook")
    slow = tmp_path / "slow.ipynb"
    slow.write_text(small_submission(*["import time\ntime.sleep(2)"] * 20))
    sentinel = uuid.uuid4().hex
    monkeypatch.setenv(SENTINEL, sentinel)
    graded = grade_in_pool([page, slow], built[1], 1, CELL_SECONDS, TEST_SECONDS, deadline=8)
    assert graded["page"].status.startswith("unreadable")
    assert graded["slow"].scores == {}
    assert re.fullmatch(r"not graded: stopped at 8 s, the limit for one submission "
                        r"\(--submission-timeout\), while running cell \w+; no question was graded",
                        graded["slow"].status), graded["slow"].status
    assert not left_running(sentinel)


def test_a_kernel_that_dies_too_often_gives_a_row_of_zeros_and_says_where(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No kernel: otter's executor is made to die at every cell that calls os._exit, as a
    # real kernel does (the class above shows one real death, graded again).
    import nbconvert.preprocessors as preprocessors
    import otter.api
    from nbclient.exceptions import DeadKernelError

    from scripts.course.run_otter import MAX_STOPS

    def die(self: Any, cell: Any, resources: Any, index: int) -> Any:
        raise DeadKernelError("Kernel died")

    def grade_submission(path: str, autograder: str, quiet: bool) -> Any:
        executor = preprocessors.ExecutePreprocessor()  # as patched while grading
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.source.startswith("import os"):
                executor.preprocess_cell(cell, {}, index)
        raise AssertionError("every submission here dies")

    monkeypatch.setattr(preprocessors.ExecutePreprocessor, "preprocess_cell", die)
    monkeypatch.setattr(otter.api, "grade_submission", grade_submission)
    path = tmp_path / "dies-often.ipynb"
    path.write_text(small_submission("x = 1", *[f"import os\nos._exit({n})"
                                                for n in range(MAX_STOPS + 1)]))
    ids = [cell.id for cell in nbformat.read(path, as_version=4).cells]
    graded = grade_one(path, tmp_path / "autograder.zip")
    places = [f"cell {cell}" for cell in ids[1:]]
    assert (graded.scores, graded.status) == ({}, (
        f"not graded: the kernel was stopped or died {MAX_STOPS + 1} times, in "
        + ", ".join(places[:-1]) + f" and {places[-1]}"))


def test_two_files_for_one_student_are_refused_before_grading(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.ipynb").write_text("{}")
    (tmp_path / "x.zip").write_bytes(b"")
    status = grading_main(["class", str(tmp_path), "-o", str(tmp_path / "out"),
                           "--autograder", str(tmp_path / "none.zip")])
    assert status == 2
    assert "x.ipynb and x.zip" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_every_hidden_test_says_what_it_checks() -> None:
    source = nbformat.read(SOURCE, as_version=4)
    configs = [yaml.safe_load(cell.source.split('"""')[1].split("\n", 1)[1])
               for cell in source.cells
               if cell.cell_type == "code" and "# BEGIN TEST CONFIG" in cell.source]
    hidden = [config for config in configs if config.get("hidden")]
    assert len(hidden) == 20
    assert all(config["failure_message"].startswith("Hidden test: checks") for config in hidden)


# ---------------------------------------------------------------------------------------------
# Gradescope: the autograder zip run as Gradescope runs it


def with_limits(archive: Path, copy: Path) -> Path:
    """A copy of an autograder zip whose settings hold this file's short limits, as an
    instructor sets them when building it (scripts.course.exercises --cell-timeout ...)."""
    if not copy.exists():
        with zipfile.ZipFile(archive) as old, zipfile.ZipFile(copy, "w") as new:
            for info in old.infolist():
                data = old.read(info)
                if info.filename == SETTINGS_FILE:
                    settings = json.loads(data)
                    settings.update(cell_seconds=CELL_SECONDS, test_seconds=TEST_SECONDS)
                    data = json.dumps(settings).encode("utf-8")
                new.writestr(info, data)
    return copy


def gradescope_layout(archive: Path, submission: Path, folder: Path) -> Path:
    """Gradescope's layout in ``folder``: source/ (the zip unpacked), submission/, results/."""
    for part in ("source", "submission", "results"):
        (folder / part).mkdir(parents=True)
    with zipfile.ZipFile(archive) as unpacked:
        unpacked.extractall(folder / "source")
    shutil.copy(submission, folder / "submission" / submission.name)
    return folder


# Each batch runs in one process, as Gradescope runs one; the batches spread over the test
# workers.
GRADESCOPE_BATCHES = {
    "hang": [("anatomy", "hostile-c-call-never-returns")],
    "others": [("anatomy", DYING), ("anatomy", "hostile-replaces-the-test-call"),
               ("anatomy", "hostile-leaves-processes-behind")],
}


@pytest.mark.parametrize("batch", GRADESCOPE_BATCHES)
def test_gradescope_grades_within_the_limits_flags_tampering_and_hides_hidden_tests(
        built: Built, tmp_path: Path, batch: str, request: pytest.FixtureRequest) -> None:
    if batch == "hang":  # the C-code hang costs its limits: the full suite, which CI runs
        request.getfixturevalue("full_suite")
    archives = {assignment: with_limits(built[2][assignment], tmp_path / f"{assignment}.zip")
                for assignment, _ in GRADESCOPE_BATCHES[batch]}
    folders = [gradescope_layout(archives[assignment], fixture(name, assignment),
                                 tmp_path / name) for assignment, name in GRADESCOPE_BATCHES[batch]]
    sentinel = uuid.uuid4().hex
    environment = {**os.environ, SENTINEL: sentinel, "MPLBACKEND": "agg",
                   "AGENTBOOK_GRACE_SECONDS": GRACE_SECONDS}
    names = {name for _, name in GRADESCOPE_BATCHES[batch]}
    before = escapees() if "hostile-leaves-processes-behind" in names else None
    PAYLOAD_RAN.unlink(missing_ok=True)
    # The zip's own run_otter.py, as Gradescope's run_autograder calls it, one folder after
    # another; a hang it failed to bound would fail here, not stall the suite.
    done = subprocess.run([sys.executable, str(folders[0] / "source" / "run_otter.py"),
                           *map(str, folders)], cwd=tmp_path, env=environment,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not left_running(sentinel, before), "grading left processes running"
    assert not PAYLOAD_RAN.exists(), "the grader loaded a pickle that ran a command"
    for (assignment, name), folder in zip(GRADESCOPE_BATCHES[batch], folders, strict=True):
        results = json.loads((folder / "results" / "results.json").read_text())
        check_gradescope_results(built, assignment, name, results)


def check_gradescope_results(built: Built, assignment: str, name: str,
                             results: dict[str, Any]) -> None:
    maximum = autograded_points(assignment)
    entries = {test["name"]: test for test in results["tests"]}
    questions = {q: test for q, test in entries.items() if q in maximum}
    scores = {q: test["score"] for q, test in questions.items()}
    assert not leaked(json.dumps(results), built[2][assignment]), name
    if name in HOSTILE:
        earned(name, scores, HOSTILE[name].costs)
        # Each reaches into the grader in its source: instructors see why, students do not.
        assert entries["Flagged for review"]["visibility"] == "hidden", name
        if HOSTILE[name].costs == "everything":
            assert results["score"] == 0, name
            assert entries["Not scored"]["visibility"] == "visible", name
        elif name in HANGS:
            output = questions[HANGS[name]]["output"]
            assert f"did not finish within {TEST_SECONDS} s" in output, name
        return
    # Each question's entry holds its hidden tests' results: hidden from students, as otter
    # has it, unless the assignment config asks to show them once grades are published.
    assert {q: test["max_score"] for q, test in questions.items()} == maximum
    assert {test["visibility"] for test in questions.values()} == {"hidden"}
    assert entries["Public Tests"]["visibility"] == "visible"
    assert name == DYING  # killed in q4c's cell, graded again without it
    earned(name, scores, "anatomy_q4c", assignment)
    assert entries["Autograder"]["visibility"] == "visible"
    assert entries["Autograder"]["output"].startswith("cell q4c-code: the kernel died there")


def test_the_autograder_zip_pins_what_the_repository_pins(built: Built) -> None:
    from scripts.checks.book_checks import release_commit

    pins = {requirement_name(line): line.strip() for name in ("requirements.txt",
                                                              "requirements-dev.txt")
            for line in (REPO_ROOT / name).read_text().splitlines()
            if "==" in line and not line.startswith("#")}
    for assignment, archive in built[2].items():
        with zipfile.ZipFile(archive) as unpacked:
            environment = yaml.safe_load(unpacked.read("environment.yml"))
        [pip] = [entry["pip"] for entry in environment["dependencies"] if isinstance(entry, dict)]
        versions = {requirement_name(entry): entry for entry in pip}
        # matplotlib only where the assignment draws; every package pinned on both sides alike.
        drawn = "matplotlib" in source_of(assignment).read_text(encoding="utf-8")
        assert "otter-grader" in versions and ("matplotlib" in versions) == drawn, assignment
        for name in versions.keys() & pins.keys():
            assert versions[name].split("==")[1] == pins[name].split("==")[1], (assignment, name)
        assert versions["agentbook"].endswith(f"@{release_commit(REPO_ROOT)}"), assignment


# ---------------------------------------------------------------------------------------------
# The time limit inside the tests, as a student's grader.check meets it


def test_a_students_check_stops_a_function_that_never_returns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # In this process, as in a student's kernel: no kernel started, the committed tests.
    import otter

    from scripts.course.time_limit import ENVIRONMENT_VARIABLE

    shutil.copytree(PUBLIC_TESTS, tmp_path / "tests")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, "0.2")
    environment: dict[str, Any] = {}
    exec(code_cell(STUDENT, "imports"), environment)
    exec(code_cell(FIXTURES / f"{LOOPING}.ipynb", "q5a-code"), environment)
    result = otter.Notebook().check("anatomy_q5a", environment)
    [answered, fresh] = result.test_case_results
    assert answered.passed and not fresh.passed
    # otter still quotes the test's own line, and the message names question, call, limit.
    assert "Error at line" in fresh.message and "first = receipt_liar()" in fresh.message
    assert fresh.message.endswith(
        "TimeoutError: anatomy_q5a: calling receipt_liar() did not finish within 0.2 s "
        "(test test_q5a_every_call_returns_a_fresh_model)")
    # A student's own `except Exception:` or bare `except:` cannot hold the test up.
    for catch in ("Exception", "BaseException"):
        exec(f"def receipt_liar():\n    while True:\n        try:\n            pass\n"
             f"        except {catch}:\n            pass\n", environment)
        [_, fresh] = otter.Notebook().check("anatomy_q5a", environment).test_case_results
        assert "did not finish within 0.2 s" in fresh.message, catch


def test_a_test_file_gets_the_time_limit_once() -> None:
    from scripts.course.time_limit import OTTER_IMPORT, with_time_limit

    written = OTTER_IMPORT + "\nOK_FORMAT = False\n\nname = 'q1'\n"
    limited = with_time_limit(written)
    assert limited.count("_limit_every_test(10, ") == 1
    assert limited.endswith(written[len(OTTER_IMPORT):])
    assert with_time_limit(limited) == limited
    assert with_time_limit(written, 2.5).count("_limit_every_test(2.5, ") == 1
    with pytest.raises(ValueError, match="not a test file that otter assign wrote"):
        with_time_limit("name = 'q1'\n")
    # Every committed test file has it, so a new assignment's get it from the build alone.
    assert all("\n_limit_every_test(10, " in path.read_text() for path in PUBLIC_TESTS.glob("*.py"))


def test_the_time_limit_and_the_grader_agree_on_how_they_talk() -> None:
    # The lines in the test files cannot import kernel_bound.py: they name its variables.
    from scripts.course.time_limit import limit_code

    code = limit_code()
    for variable in (kernel_bound.PROGRESS_VARIABLE, kernel_bound.STOPPED_VARIABLE):
        assert f'"{variable}"' in code
    assert kernel_bound.read_progress("3 start anatomy_q5a test_q5a_fresh_copies hidden") == (
        kernel_bound.RunningTest("anatomy_q5a", "test_q5a_fresh_copies", True))
    assert kernel_bound.read_progress("3 end") is None


def test_the_cell_a_kernel_died_in_is_found_by_id_or_else_by_source() -> None:
    from scripts.course.run_otter import cell_name, without_cell

    cells = [nbformat.v4.new_code_cell("x = 1", id="keep"),
             nbformat.v4.new_code_cell("import os\nos._exit(1)", id="exits")]
    notebook = nbformat.v4.new_notebook(cells=cells)
    replaced = without_cell(notebook, nbformat.from_dict(cells[1]))
    assert replaced is not None and replaced.cells[0].source == "x = 1"
    assert replaced.cells[1].source.startswith(
        "raise RuntimeError('the kernel died while running cell exits, so grading skipped it")
    assert notebook.cells[1].source.startswith("import os")  # the submission is left alone
    # otter's copy may carry ids the submission lacks: then the source identifies the cell.
    made_up = nbformat.v4.new_code_cell("import os\nos._exit(1)", id="random")
    replaced = without_cell(notebook, made_up)
    assert replaced is not None and replaced.cells[1].source.startswith("raise RuntimeError")
    # Two cells with one id (a hand-edited file): the one that ran is the one replaced.
    notebook.cells[0].id = "exits"
    replaced = without_cell(notebook, nbformat.from_dict(cells[1]))
    assert replaced is not None and replaced.cells[0].source == "x = 1"
    assert replaced.cells[1].source.startswith("raise RuntimeError")
    # The cell otter adds to run the tests is not the student's: no second grading.
    otter_cell = nbformat.v4.new_code_cell("from otter.execute import Checker\n...",
                                           metadata={kernel_bound.GRADER_CELL: True})
    assert without_cell(notebook, otter_cell) is None
    assert cell_name(otter_cell) == "otter's own cell, which runs the tests"


# ---------------------------------------------------------------------------------------------
# What the grader trusts, and what it keeps secret


def test_an_error_is_its_type_and_first_line_cut_at_a_word() -> None:
    secrets = integrity.Secrets()
    long = "word " * 100
    assert secrets.error("ValueError", f"{long}\nsecond line") == (
        "ValueError: " + " ".join(["word"] * 37) + " …")  # a whole word, then the mark
    assert len(secrets.error("ValueError", long)) <= integrity.MESSAGE_CHARACTERS + 2
    assert integrity.cut("short enough") == "short enough"
    assert integrity.cut("x" * 300) == "x" * 200 + " …"  # one word too long: cut at the limit


def test_text_from_a_hidden_test_is_redacted_and_public_text_is_not(built: Built) -> None:
    tests = zip_tests(built[1])
    secrets = integrity.Secrets.of(tests.values())
    q5a = tests["tests/anatomy_q5a.py"]
    hidden = q5a[q5a.index("def test_q5a_fresh_copies"):]
    public = "assert first is not None, 'not answered yet: receipt_liar() returns None'"
    assert public in q5a
    for text in (hidden, " ".join(hidden.split()), repr(hidden), hidden[300:700]):
        redacted = secrets.redact(text)
        assert integrity.HIDDEN_TEXT in redacted and not leaked(redacted, built[1]), redacted
    assert secrets.redact(public) == public
    assert secrets.redact("see test_q5a_fresh_copies") == "see a hidden test"
    message = ("❌ Test case failed\nError at line 95 in test anatomy_q5a:\n"
               "    assert answers[0] == answers[1], 'each call should return a fresh copy'\n"
               "AssertionError: each call should return a fresh copy of the same model")
    assert integrity.test_message(message, True, secrets) == (
        "❌ Test case failed\nAssertionError: [hidden test text]")


def test_only_submissions_that_reach_into_the_grader_are_flagged() -> None:
    # Every fixture a student could hand in by mistake scans clean, in every assignment; each
    # hostile one that reaches into the grader is flagged, with the cell and the reason. One
    # hangs in plain Python and reaches nothing: the limits, not the scan, deal with that.
    flagged = {}
    for assignment in ASSIGNMENTS:
        student = nbformat.read(REPO_ROOT / "exercises" / f"{assignment}-exercises.ipynb",
                                as_version=4)
        starter = {integrity.digest(cell.source) for cell in student.cells
                   if cell.cell_type == "code"}
        for path in (REPO_ROOT / fixtures_folder(assignment)).glob("*.ipynb"):
            flagged[f"{assignment}/{path.stem}"] = integrity.scan(
                nbformat.read(path, as_version=4), starter)
    assert {name for name, found in flagged.items() if found} == {
        f"anatomy/{name}" for name in (DYING, *HOSTILE) if name != "hostile-swallows-everything"
    }, flagged
    assert "cell q1b-code imports otter, the grader" in flagged[
        "anatomy/hostile-replaces-the-test-call"]
    assert "cell q4c-code starts, signals or ends processes" in flagged[f"anatomy/{DYING}"]


@pytest.mark.parametrize(("source", "reason"), [
    # Replacing the guard and its report, by attribute or by getattr with a plain name.
    ("Checker.agentbook_guard = lambda: None", "names the grader's files or internals"),
    ("setattr(Checker, 'agentbook_guard', None)", "names the grader's files or internals"),
    ("getattr(os, 'kill')(1, 9)", "starts, signals or ends processes"),
    ("modules = getattr(sys, 'modules')", "edits the interpreter's state"),
    ("name = 'ott' + 'er.execute'", "names the grader's files or internals"),
    ("import threading", "starts threads, which run beside the tests and the results' writer"),
])
def test_reaching_the_grader_by_another_spelling_is_flagged(source: str, reason: str) -> None:
    assert reason in integrity.scan_source(source)


@pytest.mark.parametrize(("source", "reason"), [
    ("run = exec", "runs code from text"),  # then run(text): the call needs no name
    ("payload = b'from otter.execute import Checker'", "names the grader's files or internals"),
    ("import helper_q1b", "imports helper_q1b, which is neither Python's own nor installed"),
])
def test_running_code_the_scan_cannot_read_is_flagged(source: str, reason: str) -> None:
    assert reason in integrity.scan_source(source)


def test_otters_metadata_is_flagged_and_never_graded() -> None:
    # Otter pastes a cell's metadata["otter"]["tests"] into a check cell, unescaped.
    cell = nbformat.v4.new_code_cell("x = 1", metadata={"otter": {"tests": [
        'q1")\nimport os\n#']}})
    notebook = nbformat.v4.new_notebook(cells=[cell])
    assert integrity.scan(notebook, set()) == [
        f"cell {cell.id} carries otter's metadata, which otter turns into code"]
    assert "otter" not in integrity.without_otter_metadata(notebook).cells[0].metadata
    assert "otter" in notebook.cells[0].metadata  # the submission itself is left as it was


def test_results_whose_points_differ_from_the_tests_are_not_scored() -> None:
    from otter.test_files.abstract_test import TestCase, TestCaseResult

    case = TestCase("q1 - 1", None, False, 1.0, None, None)
    inflated = TestCaseResult(dataclasses.replace(case, points=1000), None, True)
    test_file = type("File", (), {"test_cases": [case], "test_case_results": [inflated]})()
    results = type("Results", (), {"results": {"q1": test_file}})()
    shapes = {"q1": [("q1 - 1", 1.0, False)]}
    assert integrity.shape_changes(results, shapes) == ["the results of q1 do not match its tests"]
    test_file.test_case_results = [TestCaseResult(case, None, True)]
    assert integrity.shape_changes(results, shapes) == []
    test_file.test_case_results = [TestCaseResult(case, None, 1)]  # passed must be a bool
    assert integrity.shape_changes(results, shapes) != []


def test_the_grader_loads_no_otter_log(tmp_path: Path) -> None:
    # Otter loads a notebook's .OTTER_LOG with dill in the grading process; a submission can
    # write one, or hand one in inside its zip. While grading, none is loaded.
    from otter.check.logs import Log

    class Payload:
        def __reduce__(self) -> tuple[Any, tuple[str]]:
            return (os.system, (f"touch {tmp_path / 'ran'}",))

    log = tmp_path / ".OTTER_LOG"
    log.write_bytes(pickle.dumps(Payload()))
    with checked_results(Session(Settings(), kernel_bound.Limits(), tmp_path)), \
            pytest.raises(ValueError, match="reads no .OTTER_LOG"):
        Log.from_file(str(log))
    assert not (tmp_path / "ran").exists()


def test_a_progress_file_the_submission_rewrites_buys_no_time() -> None:
    clock = kernel_bound.ProgressClock(tests=2)
    assert clock.read("1 start anatomy_q1 test_a public", 0.0)
    assert clock.read("1 end", 1.0) and clock.spent == 1.0
    assert not clock.read("2 end", 2.0)  # no test was running: the cell's own time goes on
    assert not clock.read("2 start anatomy_q1 test_a public", 3.0)  # started in this cell
    assert clock.read("3 start anatomy_q1 test_b hidden", 4.0)
    assert not clock.read("4 start anatomy_q1 made_up public", 5.0)  # past the tests held
    assert clock.running is not None and clock.running.name == "test_b"


def test_the_results_are_read_back_making_only_otters_classes() -> None:
    class Payload:
        def __reduce__(self) -> tuple[Any, tuple[str]]:
            return (os.system, ("true",))

    with pytest.raises(pickle.UnpicklingError, match="posix.system|os.system"):
        integrity.SafePickle.loads(pickle.dumps(Payload()))
    from otter.test_files import GradingResults

    assert isinstance(integrity.SafePickle.loads(pickle.dumps(GradingResults([]))),
                      GradingResults)


def test_the_zip_grades_with_the_limits_it_was_built_with(tmp_path: Path) -> None:
    # The build writes the limits, the starter cells and the grading code into the zip.
    from scripts.course.time_limit import OTTER_IMPORT

    archive = tmp_path / "autograder" / "hw.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as new:
        new.writestr("tests/q1.py", OTTER_IMPORT + "\nname = 'q1'\n")
        new.writestr("run_otter.py", "# as otter assign wrote it\n")
        new.writestr("otter_config.json", "{}")
    pack_autograder(tmp_path, small_submission("x = 1", "y = 2"), ZipLimits(60, 2.5))
    settings = Settings.of_zip(archive)
    assert (settings.limits.cell_seconds, settings.limits.test_seconds) == (60, 2.5)
    assert settings.starter == {integrity.digest("x = 1"), integrity.digest("y = 2")}
    with zipfile.ZipFile(archive) as packed:
        names = set(packed.namelist())
        assert {"run_otter.py", "kernel_bound.py", "kernel_sandbox.py", "integrity.py",
                "time_limit.py"} <= names
        assert "_limit_every_test(2.5, " in packed.read("tests/q1.py").decode()
        assert "as otter assign wrote it" not in packed.read("run_otter.py").decode()


def test_only_the_graders_own_cells_get_its_longer_limit(tmp_path: Path) -> None:
    # A student's cell that names the guard, starts like otter's or claims the grader's mark
    # in its metadata is the student's: it gets the student's limit and its own name.
    claims = [nbformat.v4.new_code_cell("# agentbook_guard\nwhile True: pass"),
              nbformat.v4.new_code_cell("from otter import Notebook\nwhile True: pass",
                                        metadata={kernel_bound.GRADER_CELL: True})]
    otter_first = nbformat.v4.new_code_cell('from otter import Notebook\n'
                                            'Notebook.init_grading_mode("tests")')
    otter_last = nbformat.v4.new_code_cell("from otter.test_files import GradingResults\n"
                                           "results = GradingResults(Checker.get_results())")
    notebook = nbformat.v4.new_notebook(cells=[otter_first, *claims, otter_last])
    session = Session(Settings(), kernel_bound.Limits(60, 10), tmp_path)
    session.prepare(notebook)
    watch = session.watch()
    limits = [watch.cell_seconds(cell) for cell in notebook.cells]
    assert limits == [300, 300, 60, 60, 300, 300]  # otter's, the guard's; the student's two
    assert [cell_name(cell) for cell in notebook.cells] == [
        "otter's own cell, which runs the tests", "the grader's check of its runner",
        *(f"cell {claim.id}" for claim in claims),
        "the grader's check of its runner", "otter's own cell, which runs the tests"]


def test_everything_a_grading_started_is_ended(tmp_path: Path) -> None:
    # A process that carries the grading's mark, and one in a process group it started.
    mark = uuid.uuid4().hex
    marked = subprocess.Popen(["sleep", "60"], env={kernel_bound.MARK_VARIABLE: mark},
                              start_new_session=True)
    grouped = subprocess.Popen(["sleep", "60"], start_new_session=True)
    kernel_bound.end_processes(mark, {grouped.pid})
    for process in (marked, grouped):
        with contextlib.suppress(ChildProcessError):  # end_processes may have waited for it
            process.wait(timeout=5)
        assert not kernel_bound.alive(process.pid)
