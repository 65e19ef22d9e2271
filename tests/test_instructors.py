"""The instructor's path, as the appendix for instructors prints it.

Every shell block of instructors.qmd is run as printed, in the order printed, in a scratch
folder laid out as a clone of the repository (its scripts and Chapter 1's assignment, with the
test run's environment as .venv), on a class made of the graded fixtures: a correct
submission, then a late one with a wrong answer, graded into the same folder. Before the
block that merges the marks file, the test fills it in, as the instructor would; a file the
appendix shows with its name is written as shown. Two submissions go through otter, once for
the whole module; everything else here reads the folder they left, or checks the pure parts
without a kernel (the tests of grading grade the unanswered, looping and dying ones).
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from scripts.course import grading
from scripts.course.answers import answers_in, load_assignment, question_points, unanswered
from scripts.course.exercises import SKIP_SOLUTION_RUN, source_notebooks
from scripts.course.feedback import cut_at_word, feedback_text
from scripts.course.grading import Graded, GradingError, Score, choose_assignment
from scripts.course.results import STATUSES, Record, Submission, load_record, needs_a_look
from scripts.course.results import with_unanswered
from scripts.course.results import write_folder
from scripts.course.similarity import review_flags, similar_answers
from scripts.course.written import MarksError, read_marks, written_total

REPO_ROOT = Path(__file__).resolve().parent.parent
APPENDIX = REPO_ROOT / "instructors.qmd"
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "submissions"
ANATOMY = "anatomy-exercises"
# The class: student -> the fixture they hand in; then a late file, with a wrong answer.
CLASS = {"ada-lovelace": "correct"}
LATE = {"grace-hopper": "wrong-q3b-keyed-on-arguments"}
STUDENTS = [*CLASS, *LATE]
CLASS_COMMAND = "grading class submissions/"
FENCE = re.compile(r"^```+\s*(?:\{\.(?P<cls>[\w-]+)(?P<attrs>[^}]*)\}|(?P<lang>[\w-]*))\s*$")


@dataclass(frozen=True)
class Block:
    language: str
    text: str
    filename: str | None = None


@dataclass(frozen=True)
class Step:
    """One shell block as run, and the graded folder's files right after it."""

    block: str
    completed: subprocess.CompletedProcess[str]
    grades: dict[str, dict[str, str]]  # student -> column -> value
    feedback: dict[str, str]  # student -> their feedback file


def appendix_blocks(text: str) -> list[Block]:
    """Every fenced block of the appendix, in order: its language, text and any file name."""
    blocks, lines, opened = [], [], None
    for line in text.splitlines():
        if opened is None and (match := FENCE.match(line)):
            opened, lines = match, []
        elif opened is not None and line.startswith("```"):
            name = re.search(r'filename="([^"]+)"', opened.group("attrs") or "")
            blocks.append(Block(opened.group("cls") or opened.group("lang"),
                                "\n".join(lines) + "\n", name.group(1) if name else None))
            opened = None
        elif opened is not None:
            lines.append(line)
    return blocks


def lay_out_course(folder: Path) -> None:
    """A clone's worth for Chapter 1's assignment, and the class's files, in ``folder``."""
    shutil.copytree(REPO_ROOT / "scripts", folder / "scripts",
                    ignore=shutil.ignore_patterns("__pycache__"))
    exercises = REPO_ROOT / "exercises"
    (folder / "exercises" / "source").mkdir(parents=True)
    (folder / "exercises" / "tests").mkdir()
    for name in (f"source/{ANATOMY}.ipynb", "source/wrong-answers.yml",
                 "source/hostile-answers.yml", f"{ANATOMY}.ipynb",
                 *(f"tests/{path.name}" for path in (exercises / "tests").glob("anatomy_*.py"))):
        shutil.copy(exercises / name, folder / "exercises" / name)
    (folder / ".venv").symlink_to(sys.prefix)
    for group, students in (("submissions", CLASS), ("resubmitted", LATE)):
        (folder / group).mkdir()
        for student, fixture in students.items():
            shutil.copy(FIXTURES / f"{fixture}.ipynb", folder / group / f"{student}.ipynb")


def fill_in_marks(path: Path) -> None:
    """Mark every written answer as the instructor would: full marks but for one answer."""
    rows = list(csv.reader(path.open(encoding="utf-8")))
    header = rows[0]
    for row in rows[2:]:
        row[1:] = [f"{float(points):g}" for points in rows[1][1:]]
    rows[3][header.index("anatomy_q7c")] = "0.5"
    with path.open("w", encoding="utf-8", newline="") as file:
        csv.writer(file).writerows(rows)


def snapshot(folder: Path) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    grades = folder / "grades.csv"
    rows = ({row["student"]: row for row in csv.DictReader(grades.open(encoding="utf-8"))}
            if grades.exists() else {})
    feedback = {path.stem: path.read_text(encoding="utf-8")
                for path in sorted(folder.glob("feedback/*.txt"))}
    return rows, feedback


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory,
           full_suite: None) -> tuple[Path, list[Step]]:
    """The scratch clone after every shell block of the appendix, and each block's run.

    The walk builds an autograder and grades in kernels, as an instructor does, about 12 s
    of one worker: it belongs to the full suite (`python3 dev.py test --full`, which CI
    runs), which keeps the quick suite within its 90 s.
    """
    if not Path(sys.prefix, "bin", "python").exists():
        pytest.skip("the tests do not run in a virtual environment to stand in for .venv")
    folder = tmp_path_factory.mktemp("course")
    lay_out_course(folder)
    environment = {**os.environ, SKIP_SOLUTION_RUN: "1"}
    steps = []
    for block in appendix_blocks(APPENDIX.read_text(encoding="utf-8")):
        if block.filename:
            (folder / block.filename).write_text(block.text, encoding="utf-8")
        if block.language != "sh":
            continue
        if "written grading/" in block.text and "--marks" not in block.text:
            fill_in_marks(folder / "grading" / "written-marks.csv")
        completed = subprocess.run(["bash", "-eo", "pipefail", "-c", block.text], cwd=folder,
                                   env=environment, capture_output=True, text=True)
        steps.append(Step(block.text, completed, *snapshot(folder / "grading")))
    return folder, steps


def step(steps: list[Step], *words: str) -> Step:
    """The one step whose block holds every one of ``words``."""
    [found] = [s for s in steps if all(word in s.block for word in words)]
    return found


def test_every_shell_block_of_the_appendix_runs_as_printed(
        course: tuple[Path, list[Step]]) -> None:
    _, steps = course
    assert len(steps) == 6, [s.block for s in steps]
    for done in steps:
        assert done.completed.returncode == 0, (done.block, done.completed.stderr[-3000:])
        # No kernel's warnings: only what the commands themselves say.
        assert "WARNING" not in done.completed.stderr, done.completed.stderr


def test_the_build_says_where_each_zip_went_and_hides_hidden_results(
        course: tuple[Path, list[Step]]) -> None:
    folder, steps = course
    built = step(steps, "scripts.course.exercises --autograder build/")
    place = f"build/{ANATOMY}/{ANATOMY}-autograder.zip"
    assert f"  {place}\n" in built.completed.stdout
    with zipfile.ZipFile(folder / place) as archive:
        config = archive.read("otter_config.json").decode()
    # otter's default, false, keeps hidden tests' results from students on Gradescope.
    assert "show_hidden" not in config


def test_the_class_command_grades_into_the_folder_the_appendix_describes(
        course: tuple[Path, list[Step]]) -> None:
    folder, steps = course
    graded = step(steps, CLASS_COMMAND)
    rows = graded.grades
    assert list(rows) == ["points possible", "ada-lovelace"]
    assert {key: rows["points possible"][key] for key in ("autograded", "written", "total")} == {
        "autograded": "19.00", "written": "15.00", "total": "34.00"}
    # The total waits for the written marks, so that none is posted without them.
    ada = rows["ada-lovelace"]
    assert (ada["autograded"], ada["written"], ada["total"], ada["status"]) == (
        "19.00", "", "", "ok")
    assert "1 graded cleanly, 0 with notes in their status that their feedback explains, 0 to " \
        "look at\n" in graded.completed.stderr
    # The fixtures' written answers are the model answers: flagged, never penalized.
    assert ada["review"] == "like the model answer in every written question (100%)"
    assert "autograded: 19.00 of 19.00\nwritten: not marked yet, of 15.00\n" in (
        graded.feedback["ada-lovelace"])
    page = (folder / "grading" / "written-answers.html").read_text(encoding="utf-8")
    assert "For the instructor only" in page and page.count("<h3>Model answer</h3>") == 10
    assert "<strong>Question 1a.</strong>" in page  # the question's text, rendered


def test_a_file_graded_late_adds_its_row_and_changes_no_other(
        course: tuple[Path, list[Step]]) -> None:
    folder, steps = course
    before, after = step(steps, CLASS_COMMAND), step(steps, "class resubmitted/ --update")
    assert list(after.grades) == ["points possible", *STUDENTS]
    assert {**after.grades["ada-lovelace"], "review": ""} == {
        **before.grades["ada-lovelace"], "review": ""}
    grace = after.grades["grace-hopper"]
    assert (grace["anatomy_q3b"], grace["autograded"], grace["status"]) == ("2.50", "18.50", "ok")
    # Both wrote the model answers: each is flagged like the other too.
    assert grace["review"] == ("like the model answer in every written question (100%); "
                               "like ada-lovelace's answer in every written question (100%)")
    feedback = after.feedback["grace-hopper"]
    assert "\nanatomy_q3b: 2.50 of 3.00\n  public test: expected" in feedback
    assert "  hidden test: checks" in feedback and "Hidden test" not in feedback
    hidden = load_assignment(REPO_ROOT, ANATOMY).hidden_tests
    for done in steps:
        for text in done.feedback.values():
            assert not any(name in text for name in hidden)


def test_written_marks_merge_without_grading_again(course: tuple[Path, list[Step]]) -> None:
    _, steps = course
    merged = step(steps, "grading written grading/\n")
    assert "grading nothing again: 2 of 2 students fully marked" in merged.completed.stdout
    rows = merged.grades
    assert [(rows[s]["written"], rows[s]["total"]) for s in STUDENTS] == [
        ("15.00", "34.00"), ("14.50", "33.00")]
    assert "\nwritten: 14.50 of 15.00\ntotal: 33.00 of 34.00\n" in merged.feedback["grace-hopper"]
    assert "\nanatomy_q7c: 0.50 of 1.00\n" in merged.feedback["grace-hopper"]
    totals = step(steps, "--marks marks.csv")
    assert [(totals.grades[s]["written"], totals.grades[s]["total"]) for s in STUDENTS] == [
        ("14.00", "33.00"), ("11.50", "30.00")]


def test_the_model_answers_are_written_to_hand_out(course: tuple[Path, list[Step]]) -> None:
    folder, steps = course
    assert step(steps, "grading answers").completed.stdout == (
        f"wrote answers/{ANATOMY}-answers.ipynb\n")
    assessment = load_assignment(REPO_ROOT, ANATOMY)
    notebook = nbformat.read(folder / "answers" / f"{ANATOMY}-answers.ipynb", as_version=4)
    answers = answers_in(notebook, assessment.finder)
    assert len(answers) == len(assessment.questions) and not unanswered(answers, assessment)
    assert all(answers[q.name] == q.model for q in assessment.questions if q.manual)


# ---------------------------------------------------------------------------------------------
# What the appendix states, against the sources


def test_the_appendix_states_every_assignments_points() -> None:
    text = APPENDIX.read_text(encoding="utf-8")
    for source in source_notebooks(REPO_ROOT):
        points = question_points(nbformat.read(source, as_version=4))
        auto = [value for value, manual in points.values() if not manual]
        written = [value for value, manual in points.values() if manual]
        row = (f"| `{source.stem}` | {len(points)} | {len(auto)} questions, {sum(auto):g} "
               f"points | {len(written)} questions, {sum(written):g} points | "
               f"{sum(auto) + sum(written):g} |")
        assert row in text, row


def status_rows() -> list[tuple[re.Pattern[str], str]]:
    """The appendix's table of statuses: each status as a pattern (a word in capitals stands
    for any text), with what the instructor is to do; the most specific first."""
    text = APPENDIX.read_text(encoding="utf-8").split("### What each status means")[1]
    rows = re.findall(r"^\| `([^`]+)` \| [^|]+ \| ([^|]+) \|$", text, re.M)
    rows.sort(key=lambda row: len(re.findall(r"[A-Z]{3,}", row[0])))
    return [(re.compile("^" + re.sub(r"[A-Z]{3,}", ".+", re.escape(cell)) + "$"), action)
            for cell, action in rows]


# Every kind of note the grader writes, as it writes them (tests/test_grading.py grades each
# of these cases).
STATUS_EXAMPLES = [
    "ok",
    "not answered: q1b, q2a",
    "not answered: every question (the notebook as handed out)",
    "anatomy_q4c: cell 69b6c422 raised SyntaxError: incomplete input",
    "anatomy_q5a: cell 6eb2d6d3 ran past the time limit and was stopped",
    "anatomy_q5a: calling receipt_liar() did not finish within 1 s (a hidden test)",
    "anatomy_q5a: a hidden test did not finish within 1 s, even when interrupted, so grading "
    "stopped it",
    "anatomy_q5a: test test_q5a_x did not finish within 1 s, even when interrupted, so "
    "grading stopped it",
    "cell q4c-code: the kernel died there; graded again with that cell raising an error",
    "cell q5a-code: ran past its 6 s limit and ignored the interrupt; graded again with that "
    "cell raising an error",
    "not graded: the kernel was stopped or died 5 times, in cell a1, cell b2, cell c3, cell d4 "
    "and cell e5",
    "not graded: the kernel was stopped in otter's own cell, which runs the tests",
    "not graded: stopped at 10 s, the limit for one submission (--submission-timeout), while "
    "running cell a1; no question was graded",
    "not graded: the grading process died while running cell a1; grade it again",
    "not scored: its code changed the grader's runner: otter's test call (call_func)",
    "not graded: RuntimeError: Kernel didn't respond in 60 seconds",
    "unreadable: NotJSONError: Notebook does not appear to be JSON",
]


def test_every_kind_of_note_the_grader_knows_has_an_example_here() -> None:
    for pattern, _ in STATUSES:
        assert any(pattern.match(status) for status in STATUS_EXAMPLES), pattern.pattern


@pytest.mark.parametrize("status", STATUS_EXAMPLES)
def test_every_status_the_grader_writes_has_a_row_saying_what_to_do(status: str) -> None:
    [action, *_] = [action for pattern, action in status_rows() if pattern.match(status)]
    # The class command names the row for a look exactly where the table gives it something
    # to do.
    assessment = load_assignment(REPO_ROOT, ANATOMY)
    assert needs_a_look(Graded({}, status), assessment) == (not action.startswith("nothing"))


# ---------------------------------------------------------------------------------------------
# The pure parts, without a kernel


def fake_autograder(path: Path, questions: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("otter_config.json", "{}")
        for question in questions:
            archive.writestr(f"tests/{question}.py", "")
    return path


def autograded(assignment: str) -> list[str]:
    return [name for name, (_, manual) in question_points(nbformat.read(
        REPO_ROOT / "exercises" / "source" / f"{assignment}.ipynb", as_version=4)).items()
        if not manual]


def test_the_autograder_zip_names_its_assignment(tmp_path: Path) -> None:
    durable = fake_autograder(tmp_path / "renamed.zip", autograded("durable-exercises"))
    assert choose_assignment(REPO_ROOT, None, durable).stem == "durable-exercises"
    with pytest.raises(GradingError, match="--assignment anatomy-exercises, but"):
        choose_assignment(REPO_ROOT, ANATOMY, durable)
    partial = fake_autograder(tmp_path / "old.zip", autograded(ANATOMY)[:-1])
    with pytest.raises(GradingError, match="no exercises notebook"):
        choose_assignment(REPO_ROOT, None, partial)
    with pytest.raises(GradingError, match="missing.zip"):
        choose_assignment(REPO_ROOT, None, tmp_path / "missing.zip")


def graded_folder(folder: Path, students: dict[str, str]) -> Path:
    """A graded folder as the class command leaves it, made without a kernel: each student
    (-> the fixture they handed in) scored full marks on every autograded question."""
    assignment = load_assignment(REPO_ROOT, ANATOMY)
    full = {q.name: Score(q.points, True, ()) for q in assignment.questions if not q.manual}
    record = Record(ANATOMY, {})
    for student, fixture in students.items():
        answers = answers_in(nbformat.read(FIXTURES / f"{fixture}.ipynb", as_version=4),
                             assignment.finder)
        record.submissions[student] = Submission(Graded(full), answers,
                                                 unanswered(answers, assignment))
    write_folder(folder, record, assignment)
    return folder


def marks_file(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_bad_written_marks_are_refused_whole_naming_every_row(tmp_path: Path) -> None:
    folder = graded_folder(tmp_path / "grading", {"ada": "correct", "bo": "correct"})
    before = (folder / "grades.csv").read_text()
    bad = marks_file(tmp_path / "bad.csv", "student,anatomy_q1a,anatomy_q2c\n"
                     "ada,20,1\nadda,1,1\nbo,x,-1\nada,1,1\n")
    assert grading.main(["written", str(folder), "--marks", str(bad)]) == 2
    assert (folder / "grades.csv").read_text() == before  # nothing merged
    assessment = load_assignment(REPO_ROOT, ANATOMY)
    with pytest.raises(MarksError) as refused:
        read_marks(bad, assessment, {"ada", "bo"})
    assert str(refused.value).splitlines()[1:] == [
        "  line 2, anatomy_q1a: 20 is more than the 1 point it is worth",
        "  line 3: no student 'adda' was graded (did you mean ada?)",
        "  line 4, anatomy_q1a: 'x' is not a number",
        "  line 4, anatomy_q2c: -1 is not a mark from 0 to 2",
        "  line 5: ada again (first on line 2); keep one row per student"]
    columns = marks_file(tmp_path / "columns.csv", "student,anatomy_q1x,written,anatomy_q1a\n")
    with pytest.raises(MarksError, match="'anatomy_q1x' is no written question.*\n.*not both"):
        read_marks(columns, assessment, {"ada"})
    total = marks_file(tmp_path / "total.csv", "student,written\nada,15.5\n")
    with pytest.raises(MarksError, match="15.5 is more than the 15 points the written"):
        read_marks(total, assessment, {"ada"})


def test_written_marks_count_once_every_question_is_marked(tmp_path: Path) -> None:
    assessment = load_assignment(REPO_ROOT, ANATOMY)
    questions = list(assessment.maximum(manual=True))
    # A spreadsheet's byte-order mark and its empty lines are no problem.
    path = marks_file(tmp_path / "marks.csv", "\ufeffstudent," + ",".join(questions) + "\n"
                      "points possible," + ",".join("1" for _ in questions) + "\n"
                      "ada," + ",".join("1" for _ in questions) + "\n"
                      "bo,1" + "," * (len(questions) - 1) + "\n,,\n")
    marks = read_marks(path, assessment, {"ada", "bo", "cy"})
    assert written_total(marks["ada"], assessment) == len(questions)
    assert marks["bo"] == {questions[0]: 1.0} and written_total(marks["bo"], assessment) is None
    assert written_total({"written": 9.5}, assessment) == 9.5


def test_a_few_files_graded_again_keep_every_other_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = graded_folder(tmp_path / "grading", {"ada": "correct", "bo": "unanswered"})
    record = load_record(folder)
    record.marks = {"ada": {"written": 12.0}, "bo": {"written": 0.0}}
    write_folder(folder, record, load_assignment(REPO_ROOT, ANATOMY))
    again = tmp_path / "again"
    again.mkdir()
    shutil.copy(FIXTURES / "correct.ipynb", again / "bo.ipynb")
    # The grading itself is otter's (the module's class above runs it): here it scores 1.
    monkeypatch.setattr(grading, "grade_class", lambda args, paths, source: {
        path.stem: Graded({"anatomy_q1b": Score(1.0, True, ())}) for path in paths})
    zip_path = fake_autograder(tmp_path / "a.zip", autograded(ANATOMY))
    assert grading.main(["class", str(again), "-o", str(folder), "--update",
                         "--autograder", str(zip_path)]) == 0
    rows = {row["student"]: row for row in csv.DictReader((folder / "grades.csv").open())}
    assert (rows["ada"]["autograded"], rows["ada"]["total"]) == ("19.00", "31.00")
    assert (rows["bo"]["autograded"], rows["bo"]["total"], rows["bo"]["status"]) == (
        "1.00", "1.00", "ok")
    # Nothing to update: said, and nothing graded.
    assert grading.main(["class", str(again), "--update", "-o", str(tmp_path / "none"),
                         "--autograder", str(zip_path)]) == 2


def test_an_answer_left_as_handed_out_is_not_answered_not_a_problem() -> None:
    assessment = load_assignment(REPO_ROOT, ANATOMY)
    blank = answers_in(nbformat.read(FIXTURES / "unanswered.ipynb", as_version=4),
                       assessment.finder)
    assert unanswered(blank, assessment) == tuple(q.name for q in assessment.questions)
    errors = {"anatomy_q1b": "cell q1b-code raised AttributeError: 'ellipsis' object has no "
                             "attribute 'stop'", "anatomy_q2b": "cell q2b-code raised IndexError"}
    status = "; ".join(f"{q}: {error}" for q, error in errors.items())
    graded = with_unanswered(Graded({}, status, errors), ("anatomy_q1b",), assessment)
    assert graded.status == "not answered: q1b; anatomy_q2b: cell q2b-code raised IndexError"
    assert list(graded.cell_errors) == ["anatomy_q2b"]
    everything = with_unanswered(Graded({}, status, errors), unanswered(blank, assessment),
                                 assessment)
    assert everything.status == "not answered: every question (the notebook as handed out)"
    # A status cut short at its limit leaves no stub of a note about an unanswered question.
    cut = Graded({}, "cell q4c-code: the kernel died there; graded again with that cell raising "
                     "an error; anatomy_q1b: cell q1b-code raised Attri; anatomy_q2")
    assert with_unanswered(cut, ("anatomy_q1b", "anatomy_q2b"), assessment).status == (
        "not answered: q1b, q2b; cell q4c-code: the kernel died there; graded again with that "
        "cell raising an error")
    # An answer whose prompt cell lost its id (an editor that drops ids) is still found.
    notebook = nbformat.read(FIXTURES / "correct.ipynb", as_version=4)
    for cell in notebook.cells:
        cell.pop("id", None)
    assert len(answers_in(notebook, assessment.finder)) == len(assessment.questions)


def test_feedback_gives_the_score_against_the_maximum_and_names_no_hidden_test() -> None:
    assessment = load_assignment(REPO_ROOT, ANATOMY)
    hidden = sorted(assessment.hidden_tests)[0]
    long_error = "raised ValueError: " + "a long message " * 30
    scores = {"anatomy_q1b": Score(0.5, False, (
        "AssertionError: expected a run; found none",) * 2,
        ("Hidden test: checks the whole two-turn run.",)),
        "anatomy_q2b": Score(0.0, False, ("not answered yet: string_amount is still ...",)),
        "anatomy_q3a": Score(0.0, False, ())}
    graded = Graded(scores, f"anatomy_q1b: calling f() did not finish within 1 s (test {hidden})"
                    f"; cell q4c-code: {hidden} failed", {"anatomy_q3a": f"cell q3a {long_error}"})
    text = feedback_text("ada", graded, assessment, ("anatomy_q2b",), {"anatomy_q1a": 1.0})
    assert text.startswith("Feedback for ada on anatomy-exercises\n\nautograded: 0.50 of 19.00\n"
                           "written: not marked yet, of 15.00\ntotal: given once the written "
                           "answers are marked, of 34.00\n")
    assert "\nanatomy_q1b: 0.50 of 1.00\n  public test: expected a run; found none\n" in text
    assert text.count("expected a run") == 1 and "Hidden test" not in text
    assert "  hidden test: checks the whole two-turn run.\n" in text
    assert "\nanatomy_q2b: 0.00 of 2.00, not answered\nanatomy_q3a:" in text
    assert "\nanatomy_q1a: 1.00 of 1.00\nanatomy_q1c: not marked yet, of 1.00\n" in text
    assert hidden not in text and "note from grading: cell q4c-code: a hidden test failed" in text
    [q3a] = [line for line in text.splitlines() if "ValueError" in line]
    assert len(q3a) <= 2 + 200 + 2 and q3a.endswith(" message a …")  # indent, cut, mark


def test_a_line_is_cut_at_a_word() -> None:
    assert cut_at_word("  abc def ghi", 8) == "  abc def …"  # the indent is kept, not counted
    assert cut_at_word("abcdefghij", 4) == "abcd …"
    assert cut_at_word("short", 8) == "short"


def test_a_copied_model_answer_and_copied_classmates_are_flagged_for_review() -> None:
    assessment = load_assignment(REPO_ROOT, ANATOMY)
    models = {q.name: q.model for q in assessment.questions if q.manual}
    model = models["anatomy_q1c"]
    words = model.split()
    edited = " ".join("quite" if index % 12 == 5 else word for index, word in enumerate(words))
    own = models["anatomy_q7a"]  # an answer in the same words of the chapter, but its own
    answers = {"ada": {"anatomy_q1c": model}, "bo": {"anatomy_q1c": edited},
               "cy": {"anatomy_q1c": own, "anatomy_q7c": own}, "di": {"anatomy_q1c": own},
               "ed": {"anatomy_q1c": "step_limit ended it, but the refund was paid"}}
    matches = similar_answers(answers, models)
    assert {(m.student, m.like) for m in matches} == {
        ("ada", "the model answer"), ("bo", "the model answer"), ("ada", "bo"), ("bo", "ada"),
        ("cy", "di"), ("di", "cy")}
    assert review_flags(matches)["bo"] == ["like the model answer in q1c (75%)",
                                           "like ada's answer in q1c (75%)"]


def test_the_page_shows_a_students_html_as_text(tmp_path: Path) -> None:
    from scripts.course.written import answers_page

    assessment = load_assignment(REPO_ROOT, ANATOMY)
    answers = {"mallory": {"anatomy_q1a": "<script>alert(1)</script>\n\n**bold** <img src=x "
                                          "onerror=alert(2)>"}}
    page = answers_page(assessment, answers, {}, [])
    assert "<script>alert" not in page and "&lt;script&gt;" in page and "<img" not in page
    assert "<strong>bold</strong>" in page
    assert page.count("no answer cell found") == len(assessment.maximum(manual=True)) - 1


def test_the_page_puts_every_written_answer_under_its_question() -> None:
    from scripts.course.written import answers_page

    assessment = load_assignment(REPO_ROOT, ANATOMY)
    answers = {name: answers_in(nbformat.read(FIXTURES / f"{name}.ipynb", as_version=4),
                                assessment.finder) for name in ("correct", "unanswered")}
    page = answers_page(assessment, answers, {name: unanswered(found, assessment)
                                              for name, found in answers.items()}, [])
    written = assessment.maximum(manual=True)
    assert len(re.findall(r"<h2>(.*?)</h2>", page)) == len(written)
    assert page.count("<h3>correct</h3>") == page.count("<h3>unanswered</h3>") == len(written)
    assert "Model answer" in page and "Type your answer here" not in page
    assert page.count("<p class='none'>no answer</p>") == len(written)
