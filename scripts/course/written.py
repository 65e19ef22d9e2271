"""The written answers: the page an instructor marks them from, and the marks they give.

The marks come in a CSV file with a ``student`` column and either one column per written
question (``anatomy_q1a``, ...) or one ``written`` column for the total. Every row is checked
before any is taken: the student was graded, each mark is a number from 0 to what its question
is worth. A file with any bad row is refused whole, with every problem named, so that nothing
is merged half.
"""

from __future__ import annotations

import csv
import difflib
import html
import math
from collections.abc import Collection, Mapping
from pathlib import Path

import mistune

from scripts.course.answers import POSSIBLE, Assignment
from scripts.course.similarity import MODEL, Match

TOTAL = "written"  # the column of a written total, for marks not kept per question
TEMPLATE = "written-marks.csv"
Marks = dict[str, dict[str, float]]  # student -> question (or TOTAL) -> points


class MarksError(Exception):
    """A marks file that cannot be merged; the message names every problem in it."""


def read_marks(path: Path, assignment: Assignment, students: Collection[str]) -> Marks:
    """The written marks in ``path``, every row checked; MarksError lists each bad one."""
    maximum = assignment.maximum(manual=True)
    # utf-8-sig: a spreadsheet may start the file with a byte-order mark.
    with path.open(encoding="utf-8-sig", newline="") as file:
        reader = csv.DictReader(file)
        header = [name.strip() for name in reader.fieldnames or []]
        reader.fieldnames = header
        rows = list(enumerate(reader, start=2))
    problems = header_problems(header, assignment)
    marks: Marks = {}
    first_line: dict[str, int] = {}
    for line, row in rows:
        student = (row.get("student") or "").strip()
        cells = {column: (row.get(column) or "").strip() for column in header
                 if column in maximum or column == TOTAL}
        if student == POSSIBLE or not (student or any(cells.values())):
            continue  # the template's row of points possible, or an empty line
        if None in row:
            problems.append(f"line {line}: more cells than the header has columns")
        elif student not in students:
            problems.append(f"line {line}: {unknown_student(student, students)}")
        elif student in first_line:
            problems.append(f"line {line}: {student} again (first on line "
                            f"{first_line[student]}); keep one row per student")
        else:
            first_line[student] = line
            points, bad = read_points(cells, maximum)
            problems += [f"line {line}, {problem}" for problem in bad]
            marks[student] = points
    if problems:
        raise MarksError(f"{path}: {counted(len(problems), 'problem')}; nothing was merged:"
                         "\n  " + "\n  ".join(problems))
    return marks


def counted(number: float, noun: str) -> str:
    """'1 point', '2 points', '0.5 points'."""
    return f"{number:g} {noun}{'s' * (number != 1)}"


def header_problems(header: list[str], assignment: Assignment) -> list[str]:
    """What is wrong with a marks file's columns, if anything."""
    maximum = assignment.maximum(manual=True)
    if "student" not in header:
        return [f"no column named student; the columns must be student and either "
                f"{TOTAL} or the written questions: {', '.join(maximum)}"]
    unknown = [name for name in header if name not in (*maximum, TOTAL, "student")]
    problems = [f"column {name!r} is no written question of {assignment.name}; they are: "
                f"{', '.join(maximum)}" for name in unknown]
    if TOTAL in header and set(maximum) & set(header):
        problems.append(f"give either a {TOTAL} column or one column per question, not both")
    return problems


def unknown_student(student: str, students: Collection[str]) -> str:
    """Why a row's student cannot be taken, with the nearest graded name when there is one."""
    if not student:
        return "no student named"
    near = difflib.get_close_matches(student, sorted(students), n=1)
    hint = f" (did you mean {near[0]}?)" if near else ""
    return f"no student {student!r} was graded{hint}"


def read_points(cells: Mapping[str, str], maximum: Mapping[str, float]) -> tuple[
        dict[str, float], list[str]]:
    """A row's marks by column, and what is wrong with any of them; blank is not marked."""
    points: dict[str, float] = {}
    problems = []
    for column, text in cells.items():
        if not text:
            continue
        worth = sum(maximum.values()) if column == TOTAL else maximum[column]
        try:
            value = float(text)
        except ValueError:
            problems.append(f"{column}: {text!r} is not a number")
            continue
        if not math.isfinite(value) or value < 0:
            problems.append(f"{column}: {text} is not a mark from 0 to {worth:g}")
        elif value > worth:
            problems.append(f"{column}: {text} is more than the {counted(worth, 'point')} "
                            f"{'the written questions are' if column == TOTAL else 'it is'} "
                            "worth")
        else:
            points[column] = value
    return points, problems


def written_total(marks: Mapping[str, float], assignment: Assignment) -> float | None:
    """A student's written points, once every written question is marked (or a total given)."""
    if TOTAL in marks:
        return marks[TOTAL]
    maximum = assignment.maximum(manual=True)
    if all(question in marks for question in maximum):
        return sum(marks[question] for question in maximum)
    return None


def marks_template(assignment: Assignment, students: Collection[str]) -> str:
    """A marks file to fill in: a column per written question, a row per student."""
    maximum = assignment.maximum(manual=True)
    rows = [["student", *maximum], [POSSIBLE, *(f"{points:g}" for points in maximum.values())]]
    rows += [[student, *[""] * len(maximum)] for student in sorted(students)]
    return "".join(",".join(row) + "\n" for row in rows)


# Students' text is rendered with raw HTML escaped: a page an instructor opens runs no script a
# student wrote. Links to harmful schemes are dropped by mistune itself.
MARKDOWN = mistune.create_markdown(escape=True, plugins=["table", "strikethrough"])
STYLE = """
body { font: 16px/1.5 system-ui, sans-serif; margin: 0 auto; max-width: 78rem; padding: 1rem; }
.private { background: #fff3cd; border-left: 4px solid #b58100; padding: .5rem 1rem; }
section { border-top: 2px solid #444; margin-top: 2rem; }
.prompt { background: #f2f4f7; padding: .25rem 1rem; }
.grid { display: grid; gap: 1.5rem; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); }
article { border-bottom: 1px solid #ccc; }
aside { align-self: start; background: #eef6ee; max-height: 100vh; overflow: auto;
        padding: 0 1rem; position: sticky; top: 0; }
.none { color: #666; font-style: italic; }
.flag { background: #fde2e1; padding: .1rem .4rem; }
pre { overflow-wrap: anywhere; white-space: pre-wrap; }
code { overflow-wrap: break-word; }
table { border-collapse: collapse; display: block; max-width: 100%; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: .2rem .4rem; vertical-align: top; }
@media (max-width: 50rem) {
  .grid { grid-template-columns: minmax(0, 1fr); }
  aside { order: -1; position: static; }
}
"""


def answers_page(assignment: Assignment, answers: Mapping[str, Mapping[str, str]],
                 unanswered: Mapping[str, Collection[str]], matches: list[Match]) -> str:
    """One web page for marking: every written question with its points and rendered text,
    each student's answer under it (or "no answer"), any review flag beside the answer, and
    the model answer beside them all. It holds the model answers: the instructor's alone."""
    questions = [q for q in assignment.questions if q.manual]
    parts = [f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
             f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
             f"<title>Written answers: {assignment.name}</title><style>{STYLE}</style>"
             f"</head><body>\n<h1>Written answers: {assignment.name}</h1>\n"
             "<p class='private'>For the instructor only: beside each question's answers is "
             "its model answer. Do not hand this page out.</p>\n"
             f"<p>Mark each answer in its question's column of {TEMPLATE}, then merge the "
             "marks with the <code>written</code> command.</p>\n<nav><ul>"]
    parts += [f"<li><a href='#{q.name}'>{q.name}</a> ({counted(q.points, 'point')})</li>"
              for q in questions]
    parts.append("</ul></nav>\n")
    for question in questions:
        parts.append(f"<section id='{question.name}'>\n<h2>{question.name}: "
                     f"{counted(question.points, 'point')}</h2>\n"
                     f"<div class='prompt'>{MARKDOWN(question.prompt)}</div>\n"
                     "<div class='grid'><div class='answers'>\n")
        for student in sorted(answers):
            alike = [m for m in matches if (m.student, m.question) == (student, question.name)]
            parts.append(answer_block(student, question.name, answers[student],
                                      unanswered.get(student, ()), alike))
        parts.append(f"</div><aside><h3>Model answer</h3>{MARKDOWN(question.model)}</aside>"
                     "</div>\n</section>\n")
    parts.append("</body></html>\n")
    return "".join(parts)


def answer_block(student: str, question: str, answers: Mapping[str, str],
                 unanswered: Collection[str], alike: list[Match]) -> str:
    """One student's answer to one question, as the page shows it."""
    name = html.escape(student)
    if question not in answers:
        return f"<article><h3>{name}</h3><p class='none'>no answer cell found</p></article>\n"
    if question in unanswered:
        return f"<article><h3>{name}</h3><p class='none'>no answer</p></article>\n"
    likes = [f"{m.share:.0%} like " + (m.like if m.like == MODEL else f"{m.like}'s answer")
             for m in alike]
    notes = (f"<p class='flag'>for review: {html.escape('; '.join(likes))}</p>"
             if likes else "")
    return f"<article><h3>{name}</h3>{notes}{MARKDOWN(answers[question])}</article>\n"
