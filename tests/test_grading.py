"""Grading the exercises as an instructor does, on submissions kept as fixtures.

The autograder zips are built with ``otter assign`` once per run, and every fixture
submission is graded with it by a test of its own, as ``otter run`` grades: the correct
solution scores full marks on every public and hidden test (the proof that every reference
solution passes its own tests, so the build skips otter's own run of them), the unanswered
notebook scores nothing, and each plausible wrong answer loses points on its own question, is
caught by a public test there, and loses nothing anywhere else.
"""

from __future__ import annotations

import ast
import csv
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import nbformat
import pytest
import yaml

from scripts.course.exercises import build, committed_files, diff, unpack_tests
from scripts.course.grading import (
    FIXTURES_DIR,
    WRONG_ANSWERS,
    Graded,
    GradingError,
    Score,
    answers_page,
    committed_fixtures,
    fixture_files,
    fixtures_folder,
    grade_one,
    model_answers,
    question_points,
    read_otter_grades,
    solution_code,
    wrong_answer_name,
    write_scores,
)
from scripts.course.grading import main as grading_main

REPO_ROOT = Path(__file__).resolve().parent.parent
SOURCE = REPO_ROOT / "exercises" / "source" / "anatomy-exercises.ipynb"
STUDENT = REPO_ROOT / "exercises" / "anatomy-exercises.ipynb"
PUBLIC_TESTS = REPO_ROOT / "exercises" / "tests"
FIXTURES = REPO_ROOT / FIXTURES_DIR
# Every assignment, one per chapter with exercises: anatomy-exercises.ipynb is "anatomy".
ASSIGNMENTS = ("anatomy", "durable", "untrusted", "protocols")
# Submissions that break grading itself: a function that never returns when a test calls it,
# and a cell that kills the kernel. Graded by the class command and on Gradescope's layout.
LOOPING, DYING = "wrong-q5a-never-returns", "wrong-q4c-exits-the-kernel"
# Fixtures graded only on Gradescope's layout (below), each graded once in the whole suite.
ON_GRADESCOPE_ONLY = {LOOPING, DYING, "wrong-q1b-no-turn-budget"}
# The student files, Chapter 1's autograder zip, and every assignment's zip by name.
Built = tuple[dict[str, str], Path, dict[str, Path]]


def source_of(assignment: str) -> Path:
    return REPO_ROOT / "exercises" / "source" / f"{assignment}-exercises.ipynb"


def autograded_points(assignment: str = "anatomy") -> dict[str, float]:
    questions = question_points(nbformat.read(source_of(assignment), as_version=4))
    return {name: points for name, (points, manual) in questions.items() if not manual}


def assignment_of(question: str) -> str:
    return question.split("_q")[0]


@pytest.fixture(scope="session")
def built(made_once: Any) -> Built:
    """The student files and the autograder zip, from one run of ``otter assign``.

    Otter's check that the solutions pass every test is skipped here: grading the correct
    fixture below checks exactly that, against this zip, and grading is the slow part.
    """
    def make(folder: Path) -> None:
        files = build(REPO_ROOT, autograder=folder, check_solutions=False)
        (folder / "student-files.json").write_text(json.dumps(files), encoding="utf-8")

    folder = made_once("autograder", make)
    files = json.loads((folder / "student-files.json").read_text(encoding="utf-8"))
    archives = {assignment: next((folder / f"{assignment}-exercises").glob("*.zip"))
                for assignment in ASSIGNMENTS}
    return files, archives["anatomy"], archives


def grade(name: str, built: Built,
          assignment: str = "anatomy") -> dict[str, Score]:
    """One fixture submission graded against its autograder zip, as ``otter run`` grades it.

    Each submission is graded by its own test, so the test workers share the grading out.
    """
    return grade_one(REPO_ROOT / fixtures_folder(assignment) / f"{name}.ipynb",
                     built[2][assignment]).scores


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
# The grading table


@pytest.mark.parametrize("assignment", ASSIGNMENTS[2:])
def test_a_later_assignments_correct_submission_scores_full_marks(
        built: Built, assignment: str) -> None:
    # Chapter 1's correct submission is graded through the class command, with a class of
    # broken ones, and Chapter 2's on Gradescope's layout, below.
    scores = grade("correct", built, assignment)
    assert {question: score.points for question, score in scores.items()} == (
        autograded_points(assignment))
    assert all(score.public_passed for score in scores.values())


@pytest.mark.parametrize("assignment", ASSIGNMENTS[1:])
def test_the_unanswered_notebook_scores_nothing_and_says_so(
        built: Built, assignment: str) -> None:
    # Chapter 1's is graded on Gradescope's layout, below.
    unanswered = grade("unanswered", built, assignment)
    assert {question: score.points for question, score in unanswered.items()} == dict.fromkeys(
        autograded_points(assignment), 0.0)
    for question, score in unanswered.items():
        assert not score.public_passed, question
        # Every failing public test says so, not just the first: no internal error shows.
        assert score.public_messages and all(
            "not answered yet" in message for message in score.public_messages), (
            question, score.public_messages)


@pytest.mark.parametrize("wrong", [wrong for wrong in WRONG_ANSWERS
                                   if wrong_answer_name(wrong) not in ON_GRADESCOPE_ONLY],
                         ids=wrong_answer_name)
def test_a_wrong_answer_loses_points_on_its_own_question_and_no_other(
        built: Built, wrong: Any) -> None:
    assignment = assignment_of(wrong.question)
    scores = grade(wrong_answer_name(wrong), built, assignment)
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
                        "bo": Graded({}, "unreadable: not JSON")},
                 {"q1": 1.0, "q2": 1.0}, {"points possible": 3.0, "ana": 2.5})
    assert path.read_text().splitlines() == [
        "student,q1,q2,written,total,status", "points possible,1.00,1.00,3.00,5.00,",
        "ana,0.67,1.00,2.50,4.17,ok", "bo,0.00,0.00,,0.00,unreadable: not JSON"]


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


def test_the_class_page_puts_every_written_answer_under_its_question() -> None:
    page = answers_page([FIXTURES / "correct.ipynb", FIXTURES / "unanswered.ipynb"])
    questions = re.findall(r"<h2>(.*?)</h2>", page)
    manual = [name for name, (_, is_manual) in question_points(
        nbformat.read(SOURCE, as_version=4)).items() if is_manual]
    assert len(questions) == len(manual)
    assert page.count("<h3>correct</h3>") == page.count("<h3>unanswered</h3>") == len(manual)
    assert "Model answer" in page and "Type your answer here" in page


# ---------------------------------------------------------------------------------------------
# A real class: one bad file never costs the others


def small_submission(*sources: str) -> str:
    """A short notebook: a few cells and the check cells otter grades them by."""
    return nbformat.writes(nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(source) for source in sources]))


def test_a_class_with_a_hang_a_typo_a_corrupt_file_and_a_dead_kernel_is_graded(
        built: Built, tmp_path: Path) -> None:
    # The correct fixture beside short broken notebooks, which keep this cheap: a kernel each,
    # and every question's tests run once. Full marks for the correct one mean every public and
    # hidden test passed on the reference solutions, which `otter assign` would otherwise check.
    q7b = ("from typing import Any\nfrom collections.abc import Mapping\n"
           "from agentbook import AUTO_REFUND_LIMIT_CENTS, Gate, ToolCall\n"
           + solution_code(code_cell(SOURCE, "q7b-code")))
    folder = tmp_path / "class"
    folder.mkdir()
    for fixture in ("correct", LOOPING):
        shutil.copy(FIXTURES / f"{fixture}.ipynb", folder)
    (folder / "loops.ipynb").write_text(small_submission(
        q7b, 'grader.check("anatomy_q7b")', "while True:\n    pass",
        'grader.check("anatomy_q5a")', "x = (", 'grader.check("anatomy_q4c")'))
    # Killed in one cell, after an answer that keeps its points (killed twice: further below).
    (folder / "dies.ipynb").write_text(small_submission(
        q7b, 'grader.check("anatomy_q7b")', "import os\nos._exit(1)"))
    (folder / "page.ipynb").write_text("<!DOCTYPE html><html><body>Not found</body></html>")
    written = tmp_path / "written.csv"
    written.write_text("student,written\ncorrect,12.5\n")
    status = grading_main(["class", str(folder), "-o", str(tmp_path / "out"), "--timeout",
                           "3", "--test-timeout", "1", "--autograder", str(built[1]),
                           "--workers", "2",
                           "--engine", "process", "--written", str(written),
                           "--assignment", "anatomy-exercises"])
    assert status == 1  # the summary names the files with problems
    rows = {row["student"]: row for row in csv.DictReader(
        (tmp_path / "out/grades.csv").open(encoding="utf-8"))}
    assert list(rows) == ["points possible", "correct", "dies", "loops", "page", LOOPING]
    maximum = autograded_points()
    assert all(points > 0 for points in maximum.values())
    scores = {question: f"{points:.2f}" for question, points in maximum.items()}
    assert rows["points possible"] == {
        "student": "points possible", **scores, "written": "15.00",
        "total": f"{sum(maximum.values()) + 15:.2f}", "status": ""}
    assert rows["correct"] == {"student": "correct", **scores, "written": "12.50",
                               "total": f"{sum(maximum.values()) + 12.5:.2f}", "status": "ok"}
    assert (rows["loops"]["anatomy_q7b"], rows["loops"]["anatomy_q5a"]) == ("2.00", "0.00")
    assert rows["loops"]["status"].startswith("anatomy_q5a: cell")
    assert "time limit" in rows["loops"]["status"]
    # The cell that killed the kernel is named, and the answer before it keeps its points.
    assert re.match(r"cell \w+: the kernel died there; graded again with that cell raising "
                    "an error", rows["dies"]["status"]), rows["dies"]["status"]
    assert rows["dies"]["anatomy_q7b"] == "2.00"
    # The function that never returns costs its own question only, and says where it hung.
    earned = {q: float(rows[LOOPING][q]) for q in maximum}
    assert earned["anatomy_q5a"] < maximum["anatomy_q5a"]
    assert {q: p for q, p in earned.items() if q != "anatomy_q5a"} == {
        q: p for q, p in maximum.items() if q != "anatomy_q5a"}
    assert rows[LOOPING]["status"] == (
        "anatomy_q5a: calling receipt_liar() did not finish within 1 s "
        "(test test_q5a_every_call_returns_a_fresh_model); anatomy_q5a: calling receipt_liar() "
        "did not finish within 1 s (test test_q5a_fresh_copies)")
    looping_feedback = (tmp_path / "out/feedback" / f"{LOOPING}.txt").read_text()
    assert "receipt_liar() did not finish within 1 s" in looping_feedback
    assert rows["page"]["status"].startswith("unreadable: NotJSONError")
    assert rows["page"]["total"] == "0.00"
    # A cell that raised is named, not the symptom a later test saw.
    assert "anatomy_q4c: cell" in rows["loops"]["status"]
    assert "raised SyntaxError" in rows["loops"]["status"]
    feedback = (tmp_path / "out/feedback/loops.txt").read_text()
    q4c = feedback.split("\nanatomy_q4c:")[1].split("\nanatomy_")[0]
    assert "raised SyntaxError" in q4c and "test" in q4c and "NoneType" not in q4c
    assert "anatomy_q3b: 3.00 of 3.00" in (tmp_path / "out/feedback/correct.txt").read_text()
    assert "Model answer" in (tmp_path / "out/written-answers.html").read_text()


def test_a_kernel_that_dies_again_gives_a_row_of_zeros_and_says_where(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No kernel: otter's executor is made to die at every cell that calls os._exit, as a
    # real kernel does (the class above shows one real death, graded again).
    import nbconvert.preprocessors as preprocessors
    import otter.api
    from nbclient.exceptions import DeadKernelError

    def die(self: Any, cell: Any, resources: Any, index: int) -> Any:
        raise DeadKernelError("Kernel died")

    def grade_submission(path: str, autograder: str, quiet: bool) -> Any:
        executor = preprocessors.ExecutePreprocessor()  # as patched while grading
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.source.startswith(("import os", "os._exit")):
                executor.preprocess_cell(cell, {}, index)
        raise AssertionError("every submission here dies")

    monkeypatch.setattr(preprocessors.ExecutePreprocessor, "preprocess_cell", die)
    monkeypatch.setattr(otter.api, "grade_submission", grade_submission)
    path = tmp_path / "dies-twice.ipynb"
    path.write_text(small_submission("x = 1", "import os\nos._exit(1)", "os._exit(1)"))
    ids = [cell.id for cell in nbformat.read(path, as_version=4).cells]
    graded = grade_one(path, tmp_path / "autograder.zip")
    assert (graded.scores, graded.status) == ({}, (
        f"not graded: the kernel died in cell {ids[1]}, and again in cell {ids[2]}"))


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


def run_on_gradescope(archive: Path, submission: Path, folder: Path) -> dict[str, Any]:
    """Gradescope's layout in ``folder`` (source/ the zip unpacked, submission/, results/),
    graded by the zip's own run_otter.py, as Gradescope's run_autograder calls it."""
    import runpy

    for part in ("source", "submission", "results"):
        (folder / part).mkdir(parents=True)
    with zipfile.ZipFile(archive) as unpacked:
        unpacked.extractall(folder / "source")
    shutil.copy(submission, folder / "submission" / submission.name)
    runner = runpy.run_path(str(folder / "source" / "run_otter.py"))
    runner["main"](str(folder))
    results: dict[str, Any] = json.loads((folder / "results" / "results.json").read_text())
    return results


# One run each, spread over the test workers: every fixture here is graded nowhere else.
GRADESCOPE_CASES = [("durable", "correct"), ("anatomy", "unanswered"),
                    ("anatomy", "wrong-q1b-no-turn-budget"), ("anatomy", LOOPING),
                    ("anatomy", DYING)]


@pytest.mark.parametrize(("assignment", "name"), GRADESCOPE_CASES)
def test_gradescope_scores_each_question_and_hides_hidden_tests_until_published(
        built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        assignment: str, name: str) -> None:
    import time

    from scripts.course.time_limit import ENVIRONMENT_VARIABLE

    # The kernel inherits the tests' limit; otter prepends to PATH, which is restored after.
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, "1")
    monkeypatch.setenv("MPLBACKEND", "agg")
    monkeypatch.setenv("PATH", os.environ["PATH"])
    started = time.monotonic()
    results = run_on_gradescope(built[2][assignment],
                                REPO_ROOT / fixtures_folder(assignment) / f"{name}.ipynb",
                                tmp_path / "autograder")
    elapsed = time.monotonic() - started
    maximum = autograded_points(assignment)
    questions = {test["name"]: test for test in results["tests"] if test["name"] in maximum}
    assert {q: test["max_score"] for q, test in questions.items()} == maximum
    # Each question's entry holds its hidden tests' results: students see it once published.
    assert {test["visibility"] for test in questions.values()} == {"after_published"}
    [public] = [test for test in results["tests"] if test["name"] == "Public Tests"]
    assert public["visibility"] == "visible"
    earned = {q: test["score"] for q, test in questions.items()}
    lost = {"correct": None, "unanswered": None, "wrong-q1b-no-turn-budget": "anatomy_q1b",
            LOOPING: "anatomy_q5a", DYING: "anatomy_q4c"}[name]
    if name == "unanswered":
        assert earned == dict.fromkeys(maximum, 0.0)
        assert "not answered yet" in public["output"]
        return
    assert {q: p for q, p in earned.items() if q != lost} == {
        q: p for q, p in maximum.items() if q != lost}
    if lost is not None:
        assert earned[lost] < maximum[lost]
    if name == LOOPING:
        assert ("anatomy_q5a: calling receipt_liar() did not finish within 1 s"
                in questions["anatomy_q5a"]["output"])
        # Two tests call the function and are stopped at 1 s each; the rest is one kernel's
        # run of the notebook, a few seconds even on a busy machine.
        assert elapsed < 60, elapsed
    if name == DYING:
        [note] = [test for test in results["tests"] if test["name"] == "Autograder"]
        assert note["visibility"] == "visible"
        assert note["output"].startswith("cell q4c-code: the kernel died there")


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
    with pytest.raises(ValueError, match="not a test file that otter assign wrote"):
        with_time_limit("name = 'q1'\n")
    # Every committed test file has it, so a new assignment's get it from the build alone.
    assert all("\n_limit_every_test(10, " in path.read_text() for path in PUBLIC_TESTS.glob("*.py"))


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
    otter_cell = nbformat.v4.new_code_cell("from otter.execute import Checker\n...")
    assert without_cell(notebook, otter_cell) is None
    assert cell_name(otter_cell) == "otter's own cell, which runs the tests"


def test_gradescope_runs_every_cell_within_a_time_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Otter sets no limit on a cell; the zip's runner does, as the class command does.
    import otter.run.run_autograder as entry

    from scripts.course import run_otter

    limits: list[int] = []

    def run_autograder(folder: str) -> None:
        import nbconvert.preprocessors as preprocessors

        executor = preprocessors.ExecutePreprocessor()  # as otter makes it, while grading
        limits.extend(executor.timeout_func(nbformat.v4.new_code_cell(source))
                      for source in ("while True:\n    pass", 'grader.check("anatomy_q1b")'))

    monkeypatch.setattr(entry, "main", run_autograder)
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission" / "hw.ipynb").write_text(small_submission("x = 1"))
    run_otter.main(str(tmp_path))
    assert limits == [run_otter.CELL_SECONDS, 5 * run_otter.CELL_SECONDS]
