"""What an exercises notebook asks and what a submission answers.

An assignment's questions, their points, prompts and model answers come from its annotated
source in exercises/source/; the answer a student gave to each question is read from the
answer cells of their notebook, found under the question's prompt. An answer still as the
student notebook handed it out is not answered. The model-answer notebooks, to hand out once
the deadline has passed, are the student notebooks with every answer filled in from the source:

    python -m scripts.course.grading answers -o answers/
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import nbformat
import yaml

from scripts.course.exercises import SOURCE_DIR, normalize

ANSWER_TAG = "otter_answer_cell"
POSSIBLE = "points possible"  # the first row of grades and marks: what each column is out of
QUESTION_MARKER = re.compile(r"<!--\s*(BEGIN|END) QUESTION\s*-->")
# Lines that mark solutions in the annotated source; a student never writes them.
SOLUTION_MARKER = re.compile(r"^\s*#\s*(BEGIN|END) SOLUTION( NO PROMPT)?\s*$")
PROMPT_BLOCK = re.compile(r'^""" # BEGIN PROMPT\n.*?^"""  # END PROMPT\n', re.M | re.S)
INLINE_SOLUTION = re.compile(r"\s+#\s*SOLUTION\s*$")
HIDDEN_TEST = re.compile(r"^hidden:\s*true\s*$", re.M)
TEST_NAME = re.compile(r"^def (test_\w+)", re.M)


def question_points(source: nbformat.NotebookNode) -> dict[str, tuple[float, bool]]:
    """Every question of the annotated source: name -> (points, graded by hand)."""
    questions = {}
    for cell in source.cells:
        if cell.cell_type == "raw" and re.match(r"#\s*BEGIN QUESTION", cell.source):
            config = yaml.safe_load(cell.source)
            questions[config["name"]] = (float(config["points"]), bool(config.get("manual")))
    return questions


def solution_code(source: str) -> str:
    """A solution cell as a student who got it right would leave it: no otter markers."""
    text = PROMPT_BLOCK.sub("", source + "\n")
    lines = [INLINE_SOLUTION.sub("", line) for line in text.splitlines()
             if not SOLUTION_MARKER.match(line)]
    return "\n".join(lines).strip("\n")


def model_answers(source: nbformat.NotebookNode) -> dict[str, str]:
    """Each hand-graded question's model answer, by the id of the prompt cell it answers."""
    answers: dict[str, str] = {}
    prompt, in_solution = "", False
    for cell in source.cells:
        first = cell.source.split("\n", 1)[0]
        if cell.cell_type == "raw" and re.match(r"#\s*BEGIN SOLUTION", first):
            in_solution = True
        elif cell.cell_type == "raw" and re.match(r"#\s*END SOLUTION", first):
            in_solution = False
        elif cell.cell_type == "markdown" and in_solution:
            answers[prompt] = cell.source
        elif cell.cell_type == "markdown":
            prompt = cell.id
    return answers


def correct_submission(student: nbformat.NotebookNode,
                       source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The student notebook with every answer cell filled in from the reference solutions."""
    code = {cell.id: solution_code(cell.source) for cell in source.cells
            if cell.cell_type == "code"}
    answers = model_answers(source)
    filled = nbformat.from_dict(student)
    previous = ""
    for cell in filled.cells:
        if ANSWER_TAG in cell.metadata.get("tags", []):
            cell.source = code[cell.id] if cell.cell_type == "code" else answers[previous]
        previous = cell.id
    return filled


@dataclass(frozen=True)
class Question:
    """One question of an assignment, as its annotated source states it."""

    name: str  # e.g. anatomy_q1a
    points: float
    manual: bool  # graded by hand: a written answer
    prompt_id: str  # the prompt cell's id, the same in the source and the student notebook
    prompt: str  # the question's text, Markdown
    model: str = ""  # a written question's model answer, Markdown


@dataclass(frozen=True)
class Assignment:
    """An exercises notebook: its questions, each answer as handed out, its hidden tests."""

    name: str  # e.g. anatomy-exercises
    questions: tuple[Question, ...]
    starter: Mapping[str, str]  # question -> its answer cells as the student notebook has them
    finder: Mapping[str, str]  # a prompt cell's "id:..." or "text:..." -> its question
    hidden_tests: frozenset[str]  # the names of the hidden tests' functions

    def maximum(self, manual: bool) -> dict[str, float]:
        """The points of every autograded question (or every written one), by name."""
        return {q.name: q.points for q in self.questions if q.manual == manual}


def prompt_text(source: str) -> str:
    """A prompt cell's text without otter's question markers, to find it by its words."""
    return QUESTION_MARKER.sub("", source).strip()


def load_assignment(root: Path, name: str) -> Assignment:
    """The assignment whose annotated source is exercises/source/NAME.ipynb."""
    source = nbformat.read(root / SOURCE_DIR / f"{name}.ipynb", as_version=4)
    student = nbformat.read(root / "exercises" / f"{name}.ipynb", as_version=4)
    points, models = question_points(source), model_answers(source)
    questions, after_begin = [], None
    for cell in source.cells:
        if cell.cell_type == "raw" and re.match(r"#\s*BEGIN QUESTION", cell.source):
            after_begin = yaml.safe_load(cell.source)["name"]
        elif after_begin is not None and cell.cell_type == "markdown":
            value, manual = points[after_begin]
            questions.append(Question(after_begin, value, manual, cell.id, cell.source,
                                      models.get(cell.id, "")))
            after_begin = None
    by_id = {cell.get("id"): cell.source for cell in student.cells}
    finder = {f"id:{q.prompt_id}": q.name for q in questions}
    finder |= {f"text:{prompt_text(by_id.get(q.prompt_id, q.prompt))}": q.name
               for q in questions}
    hidden = {found for cell in source.cells if cell.cell_type == "code"
              and "BEGIN TEST CONFIG" in cell.source and HIDDEN_TEST.search(cell.source)
              for found in TEST_NAME.findall(cell.source)}
    return Assignment(name, tuple(questions), answers_in(student, finder), finder,
                      frozenset(hidden))


def answers_in(notebook: nbformat.NotebookNode, finder: Mapping[str, str]) -> dict[str, str]:
    """Each question's answer in ``notebook``: its answer cells (tagged as otter tags them),
    under the question's prompt, found by the prompt cell's id or, where an editor dropped the
    ids, by its words. A question whose answer cells are gone is left out."""
    answers: dict[str, list[str]] = {}
    current = None
    for cell in notebook.cells:
        found = finder.get(f"id:{cell.get('id')}") or finder.get(
            f"text:{prompt_text(cell.source)}")
        if found and cell.cell_type == "markdown":
            current = found
        elif current and ANSWER_TAG in cell.get("metadata", {}).get("tags", []):
            answers.setdefault(current, []).append(cell.source)
    return {question: "\n\n".join(parts) for question, parts in answers.items()}


def same_text(first: str, second: str) -> bool:
    """Whether two answers differ only in white space at the ends of lines or of the text."""
    def lines(text: str) -> list[str]:
        return [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    return lines(first) == lines(second)


def unanswered(answers: Mapping[str, str], assignment: Assignment) -> tuple[str, ...]:
    """The questions whose answer is still as handed out, or empty, in notebook order."""
    return tuple(q.name for q in assignment.questions if q.name in answers and (
        not answers[q.name].strip() or same_text(answers[q.name], assignment.starter.get(
            q.name, ""))))


NOTE_ID = "model-answers-note"
NOTE = """\
**Model answers.** This is the exercises notebook with every answer filled in: the code that
passes every test, public and hidden, and a model answer under each written question. Run it
from the top to see each run the questions ask about, and compare it with your own notebook.
"""


def model_answer_notebook(root: Path, name: str) -> str:
    """The student notebook of assignment ``name`` with every answer filled in from its
    annotated source and a note saying so, as the text of an .ipynb file."""
    source = nbformat.read(root / SOURCE_DIR / f"{name}.ipynb", as_version=4)
    student = nbformat.read(root / "exercises" / f"{name}.ipynb", as_version=4)
    filled = correct_submission(student, source)
    filled.cells.insert(1, nbformat.v4.new_markdown_cell(NOTE, id=NOTE_ID))
    source_ids = {cell.get("id") for cell in source.cells} | {NOTE_ID}
    return normalize(nbformat.writes(filled), source_ids)


def write_model_answers(root: Path, names: list[str], into: Path) -> list[Path]:
    """Write NAME-answers.ipynb into ``into`` for every assignment named; return the paths."""
    into.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        path = into / f"{name}-answers.ipynb"
        path.write_text(model_answer_notebook(root, name), encoding="utf-8")
        written.append(path)
    return written
