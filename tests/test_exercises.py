"""The chapter's exercises: the committed student version is current, gives no answer away,
keeps the hidden tests hidden, and sets itself up on Colab and Binder."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
import yaml
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from scripts.checks.book_checks import INSTALL_CELL, release_commit
from scripts.course.exercises import (
    ExercisesError,
    bundle_tests,
    diff,
    stable_ids,
    unpack_tests,
    write,
)
from scripts.build.regenerate import KERNELSPEC

REPO_ROOT = Path(__file__).resolve().parent.parent
CHAPTER = REPO_ROOT / "chapters" / "01_anatomy.ipynb"
SOURCE = REPO_ROOT / "exercises" / "source" / "anatomy-exercises.ipynb"
STUDENT = REPO_ROOT / "exercises" / "anatomy-exercises.ipynb"
PUBLIC_TESTS = REPO_ROOT / "exercises" / "tests"

COLAB_INSTALL_CELL = INSTALL_CELL.format(repo_url="https://github.com/agentbook/agentbook",
                                         ref=release_commit(REPO_ROOT))

BOUNDARY = re.compile(r"#\s+(begin|end)\s+(question|prompt|solution|tests)\b", re.IGNORECASE)
# Everything otter's markers look like; none of it may reach a student.
MARKERS = re.compile(
    r"#\s*(BEGIN|END)\s+(SOLUTION|PROMPT|TESTS|QUESTION|TEST CONFIG)\b|#\s*SOLUTION\b"
    r"|#\s*HIDDEN\b|#\s*ASSIGNMENT CONFIG\b|#\s*SEED\b",
    re.IGNORECASE,
)


@dataclass
class Question:
    """One otter question of the source notebook, as the tests need it."""

    name: str
    manual: bool
    solution_code: list[str] = field(default_factory=list)  # lines a student must not see
    solution_markdown: list[str] = field(default_factory=list)
    public_tests: list[str] = field(default_factory=list)  # test function names
    hidden_tests: list[str] = field(default_factory=list)


@dataclass
class Source:
    """The annotated source notebook, split into questions and what a student may see."""

    questions: dict[str, Question]
    visible_lines: set[str]  # stripped lines of everything outside solutions and tests


def split_solution(source: str) -> tuple[list[str], list[str]]:
    """A code cell's lines that otter removes for students, and the lines it keeps."""
    secret, kept, inside = [], [], False
    for line in source.splitlines():
        stripped = line.strip()
        if re.match(r"#\s*BEGIN SOLUTION", stripped):
            inside = True
        elif re.match(r"#\s*END SOLUTION", stripped):
            inside = False
        elif inside:
            secret.append(stripped)
        elif re.search(r"#\s*SOLUTION\b", stripped):
            secret.append(stripped.split("=", 1)[-1].split("#")[0].strip())
        else:
            kept.append(stripped)
    return [line for line in secret if line], kept


def read_source() -> Source:
    notebook = nbformat.read(SOURCE, as_version=4)
    questions: dict[str, Question] = {}
    visible: set[str] = set()
    question: Question | None = None
    blocks: list[str] = []
    for cell in notebook.cells:
        first = cell.source.split("\n", 1)[0]
        boundary = BOUNDARY.match(first) if cell.cell_type == "raw" else None
        if boundary:
            kind = boundary.group(2).lower()
            if boundary.group(1).lower() == "end":
                blocks.pop()
                question = None if kind == "question" else question
            else:
                blocks.append(kind)
                if kind == "question":
                    config = yaml.safe_load(cell.source)
                    question = Question(config["name"], bool(config.get("manual")))
                    questions[question.name] = question
            continue
        block = blocks[-1] if blocks else None
        if block == "tests":
            assert question is not None
            [test] = [node for node in ast.parse(cell.source).body
                      if isinstance(node, ast.FunctionDef)]
            # Hidden as otter reads it: a first line "# HIDDEN", or "hidden: true" in the
            # test's config block.
            hidden = (re.search(r"\bhidden\b", first, re.IGNORECASE) and first.startswith("#")
                      or re.search(r"^hidden:\s*true\s*$", cell.source, re.M | re.I))
            (question.hidden_tests if hidden else question.public_tests).append(test.name)
        elif block == "solution" and cell.cell_type == "markdown":
            assert question is not None
            question.solution_markdown += [ln.strip() for ln in cell.source.splitlines()]
        elif block == "solution" and cell.cell_type == "code":
            assert question is not None
            secret, kept = split_solution(cell.source)
            question.solution_code += secret
            visible |= set(kept)
        elif cell.cell_type != "raw":
            visible |= {ln.strip() for ln in cell.source.splitlines()}
    return Source(questions, visible)


def student_text() -> str:
    notebook = nbformat.read(STUDENT, as_version=4)
    return "\n".join(cell.source for cell in notebook.cells)


def public_test_files() -> dict[str, str]:
    """The public tests of Chapter 1's assignment, the one this file checks."""
    return {path.stem: path.read_text(encoding="utf-8")
            for path in sorted(PUBLIC_TESTS.glob("anatomy_*.py"))}


# ---------------------------------------------------------------------------------------------
# The student version is current, and every solution passes its own tests


def test_check_mode_reports_a_stale_notebook_and_stray_tests() -> None:
    wanted = {"exercises/a.ipynb": "new\n", "exercises/tests/q.py": "test\n"}
    committed = {"exercises/a.ipynb": "old\n", "exercises/tests/q.py": "test\n",
                 "exercises/tests/gone.py": "stale\n"}
    report = diff(committed, wanted)
    assert "-old" in report and "+new" in report
    assert "a/exercises/tests/gone.py" in report and "+++ /dev/null" in report
    assert "q.py" not in report
    assert diff(wanted, wanted) == ""


def test_writing_updates_changed_files_and_removes_stray_tests(tmp_path: Path) -> None:
    (tmp_path / "exercises" / "tests").mkdir(parents=True)
    (tmp_path / "exercises" / "tests" / "gone.py").write_text("stale\n")
    wanted = {"exercises/a.ipynb": "new\n"}
    changed = write(tmp_path, wanted, {"exercises/tests/gone.py": "stale\n"})
    assert changed == ["exercises/a.ipynb", "exercises/tests/gone.py"]
    assert (tmp_path / "exercises" / "a.ipynb").read_text() == "new\n"
    assert not (tmp_path / "exercises" / "tests" / "gone.py").exists()


def test_cells_otter_adds_get_ids_that_do_not_change_between_runs() -> None:
    notebook = new_notebook(cells=[
        new_markdown_cell("<!-- END QUESTION -->"),
        new_markdown_cell("prompt", id="q1-prompt"),
        new_markdown_cell("_Type your answer here._"),
        new_code_cell('grader.check("q1")'),
        new_code_cell("x = ...", id="q2-code"),
        new_code_cell('grader.check("q2")'),
    ])
    stable_ids(notebook, {"q1-prompt", "q2-code"})
    assert [cell.id for cell in notebook.cells] == [
        "start-otter-1", "q1-prompt", "q1-prompt-otter-1", "q1-prompt-otter-2",
        "q2-code", "q2-code-otter-1",
    ]


# ---------------------------------------------------------------------------------------------
# Nothing a student should not see


def test_student_notebook_contains_no_solution_and_no_marker() -> None:
    source, text = read_source(), student_text()
    assert not MARKERS.search(text), MARKERS.search(text)
    student_lines = {line.strip() for line in text.splitlines()}
    for question in source.questions.values():
        leaked = [line for line in question.solution_code
                  if len(line) > 8 and line not in source.visible_lines and line in student_lines]
        assert not leaked, f"{question.name} shows solution code: {leaked}"
        answer = [line for line in question.solution_markdown if len(line) > 20]
        assert not [line for line in answer if line in text], f"{question.name} shows its answer"


def test_every_answer_cell_in_the_student_notebook_is_a_placeholder() -> None:
    notebook = nbformat.read(STUDENT, as_version=4)
    answers = [cell for cell in notebook.cells
               if "otter_answer_cell" in cell.metadata.get("tags", [])]
    source = read_source()
    assert len(answers) == len(source.questions)
    for cell in answers:
        if cell.cell_type == "code":
            ellipses = [node for node in ast.walk(ast.parse(cell.source))
                        if isinstance(node, ast.Constant) and node.value is Ellipsis]
            assert ellipses, f"answer cell {cell.id} has no `...` to replace"
        else:
            assert cell.source.strip().startswith("_") and len(cell.source) < 80, cell.source


def test_hidden_tests_are_absent_from_the_student_version() -> None:
    source, text, files = read_source(), student_text(), public_test_files()
    shipped = "\n".join(files.values())
    for question in source.questions.values():
        for name in question.hidden_tests:
            assert name not in shipped and name not in text, f"hidden test {name} is shipped"
        for name in question.public_tests:
            assert f"def {name}(" in files[question.name], f"public test {name} is missing"
    assert set(re.findall(r"hidden=(\w+)", shipped)) == {"False"}


# ---------------------------------------------------------------------------------------------
# The shape of the exercises


def test_one_exercise_for_each_of_the_chapters_seven() -> None:
    chapter = nbformat.read(CHAPTER, as_version=4)
    [section] = [cell.source for cell in chapter.cells if "{#sec-exercises}" in cell.source]
    wanted = re.findall(r"^\d+\. \*\*(.+?)\.?\*\*", section.split("{#sec-exercises}")[1], re.M)
    source = nbformat.read(SOURCE, as_version=4)
    headings = [match for cell in source.cells if cell.cell_type == "markdown"
                for match in re.findall(r"^## Exercise (\d+): (.+)$", cell.source, re.M)]
    assert [title for _, title in headings] == wanted
    assert [int(number) for number, _ in headings] == list(range(1, len(wanted) + 1))
    questions = read_source().questions
    for number, title in headings:
        assert any(name.startswith(f"anatomy_q{number}") for name in questions), title


def test_questions_have_answers_and_tests_of_both_kinds() -> None:
    for question in read_source().questions.values():
        if question.manual:
            assert question.solution_markdown, f"{question.name} needs a model answer"
            assert not question.public_tests + question.hidden_tests, question.name
        else:
            assert question.solution_code, f"{question.name} needs a reference solution"
            assert question.public_tests, f"{question.name} needs public tests"
            assert question.hidden_tests, f"{question.name} needs hidden tests"


def test_source_notebook_is_stored_clean() -> None:
    notebook = nbformat.read(SOURCE, as_version=4)
    assert notebook.metadata == {"kernelspec": KERNELSPEC}
    for cell in notebook.cells:
        assert cell.get("id"), "every cell needs an id, the student version keeps them"
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.id


# ---------------------------------------------------------------------------------------------
# Colab and Binder


@pytest.mark.parametrize("path", [SOURCE, STUDENT], ids=["source", "student"])
def test_first_code_cell_installs_the_package_only_where_it_is_missing(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    first = next(cell for cell in notebook.cells if cell.cell_type == "code")
    assert first.source == COLAB_INSTALL_CELL


def test_the_set_up_writes_missing_public_tests_and_never_replaces_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # In the autograder, tests/ beside the notebook holds the hidden tests too, under the same
    # file names: the set-up cell must leave every existing file alone.
    notebook = nbformat.read(STUDENT, as_version=4)
    [setup] = [cell.source for cell in notebook.cells if cell.id == "public-tests"]
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "anatomy_q7b.py").write_text("hidden tests\n")
    monkeypatch.chdir(tmp_path)
    exec(setup, {})
    assert (tmp_path / "tests" / "anatomy_q7b.py").read_text() == "hidden tests\n"
    for name, text in public_test_files().items():
        if name != "anatomy_q7b":
            assert (tmp_path / "tests" / f"{name}.py").read_text(encoding="utf-8") == text


def test_bundled_tests_are_packed_into_the_one_line_that_holds_them() -> None:
    source = nbformat.v4.new_notebook(cells=[new_code_cell('PUBLIC_TESTS = ""\nx = 1', id="s")])
    packed = bundle_tests(nbformat.writes(source), {"q.py": "def test(): pass\n" * 40})
    [cell] = nbformat.reads(packed, as_version=4).cells
    namespace: dict[str, str] = {}
    exec(cell.source, namespace)
    assert unpack_tests(namespace["PUBLIC_TESTS"]) == {"q.py": "def test(): pass\n" * 40}
    assert max(len(line) for line in cell.source.splitlines()) <= 100
    with pytest.raises(ExercisesError, match="exactly one line"):
        bundle_tests(nbformat.writes(new_notebook(cells=[new_code_cell("x = 1")])), {})


def test_grader_is_created_without_a_notebook_path() -> None:
    # On Colab the notebook file is not on disk; otter must find its tests in tests/ instead.
    notebook = nbformat.read(STUDENT, as_version=4)
    code = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    assert "grader = otter.Notebook()" in code[3]
    assert all("import agentbook" not in cell and "from agentbook" not in cell
               for cell in code[:4])


def test_every_public_assert_says_what_was_expected_and_what_was_found() -> None:
    # A message that shows a value found ("{...}") must also say what was expected of it.
    unclear = []
    for name, text in public_test_files().items():
        for test in [node for node in ast.parse(text).body if isinstance(node, ast.FunctionDef)]:
            assert ast.get_docstring(test), f"{name}: {test.name} needs a docstring"
            for node in ast.walk(test):
                if isinstance(node, ast.Assert):
                    message = ast.unparse(node.msg) if node.msg else ""
                    if not ("not answered yet" in message or (
                            "expected" in message and ("found" in message or "{" not in message))):
                        unclear.append(f"{name}: {test.name}: {message or 'no message'}")
    assert not unclear, "\n".join(unclear)


def test_every_public_test_notices_an_unanswered_question_first() -> None:
    # The student version leaves `...` (or a function returning None) where an answer goes;
    # its first failing assert must say so rather than surface an internal error.
    for name, text in public_test_files().items():
        tests = [node for node in ast.parse(text).body if isinstance(node, ast.FunctionDef)]
        said = [test.name for test in tests if "not answered yet" in ast.unparse(test)]
        assert said, f"{name}: no public test says 'not answered yet'"


@pytest.mark.parametrize("topic", ["anatomy", "durable", "untrusted", "protocols"])
def test_the_student_notebook_links_to_its_chapter_and_never_to_the_solutions(
        topic: str) -> None:
    text = (REPO_ROOT / "exercises" / f"{topic}-exercises.ipynb").read_text(encoding="utf-8")
    [chapter] = sorted((REPO_ROOT / "notebooks").glob(f"*_{topic}.ipynb"))
    assert f"blob/main/notebooks/{chapter.name}" in text
    assert "exercises/source" not in text  # the annotated source holds the hidden tests
