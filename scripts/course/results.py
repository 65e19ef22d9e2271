"""A graded folder: what grading found, kept once, and every file made from it.

The class command keeps each submission's grading, its written answers and what it left
unanswered in ``graded.json``; the written marks join them there. Everything an instructor
reads is written again from that record: ``grades.csv``, ``feedback/NAME.txt``, the
``written-answers.html`` page to mark from, and the ``written-marks.csv`` file to fill in
(only ever added to, never overwritten, as marks may be in it).
So marks merge, and a few submissions are graded again, without grading the class again.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scripts.course.answers import POSSIBLE, Assignment
from scripts.course.feedback import feedback_text, status_parts
from scripts.course.similarity import THRESHOLD, Match, review_flags, similar_answers
from scripts.course.written import TEMPLATE, Marks, answers_page, marks_template, written_total

if TYPE_CHECKING:
    from scripts.course.grading import Graded

RECORD = "graded.json"
EVERY_QUESTION = "every question (the notebook as handed out)"


@dataclass(frozen=True)
class Submission:
    """One student's graded submission, with what a page and the review flags need."""

    graded: Graded
    answers: dict[str, str] = field(default_factory=dict)  # written question -> the answer
    unanswered: tuple[str, ...] = ()  # questions left as handed out, written ones included


@dataclass
class Record:
    """Everything a graded folder holds, by student."""

    assignment: str
    submissions: dict[str, Submission]
    marks: Marks = field(default_factory=dict)
    threshold: float = THRESHOLD  # the similarity that flags an answer for review


def short(question: str) -> str:
    """anatomy_q1b -> q1b: a question's name within its assignment."""
    return question.split("_", 1)[-1]


def with_unanswered(graded: Graded, unanswered: tuple[str, ...],
                    assignment: Assignment) -> Graded:
    """``graded`` with the questions left as handed out said to be not answered: the errors
    their starter code raised are symptoms of that, not problems to look into."""
    if not unanswered:
        return graded
    names = [q.name for q in assignment.questions]
    # A note about such a question goes, even one that a long status cut short.
    kept = [part for part in status_parts(graded.status, names) if part != "ok" and not any(
        part.startswith(f"{question}:") or question.startswith(part) for question in unanswered)]
    said = (EVERY_QUESTION if len(unanswered) == len(names)
            else ", ".join(map(short, unanswered)))
    return dataclasses.replace(
        graded, status="; ".join([f"not answered: {said}", *kept]),
        cell_errors={q: error for q, error in graded.cell_errors.items() if q not in unanswered})


# Every note the grader writes in a status, as a pattern, and whether it asks the instructor
# to act. The notes that ask nothing only explain points a student lost, which their feedback
# tells them. The others: a file not graded or not scored, a notebook with nothing answered
# (the right file?), a cell stopped at its limit (too short a limit for the machine?). A note
# this table does not know asks too. instructors.qmd has the same table, in words.
STATUSES: tuple[tuple[re.Pattern[str], bool], ...] = tuple(
    (re.compile(pattern), asks) for pattern, asks in (
        (r"ok$", False),
        (r"not answered: every question", True),
        (r"not answered: ", False),
        (r"[a-z]+_q\w+: cell \S+ raised ", False),
        (r"[a-z]+_q\w+: cell \S+ ran past the time limit and was stopped", True),
        (r"[a-z]+_q\w+: calling .+ did not finish within ", False),
        (r"[a-z]+_q\w+: (a hidden test|test \w+) did not finish within .+ even when "
         r"interrupted", False),
        (r"cell \S+: the kernel died there; graded again", False),
        (r"cell \S+: ran past its .+ limit and ignored the interrupt; graded again", True),
        (r"not scored: ", True),
        (r"not graded: ", True),
        (r"unreadable: ", True),
    ))


def asks_for_a_look(note: str) -> bool:
    """Whether one note of a status asks the instructor to act (see STATUSES)."""
    return next((asks for pattern, asks in STATUSES if pattern.match(note)), True)


def needs_a_look(graded: Graded, assignment: Assignment) -> bool:
    """Whether a row's status asks the instructor to act: any of its notes does."""
    parts = status_parts(graded.status, [q.name for q in assignment.questions])
    return any(map(asks_for_a_look, parts))


def write_scores(path: Path, graded: Mapping[str, Graded], maximum: Mapping[str, float],
                 written_maximum: float = 0.0,
                 written: Mapping[str, float | None] | None = None,
                 review: Mapping[str, list[str]] | None = None) -> None:
    """One row per student: points per autograded question, then ``autograded``, ``written``
    and ``total``, each out of its own maximum in the first row, then the status and any
    review flags. ``total`` stays blank until the student's written answers are marked."""
    questions = list(maximum)
    auto = sum(maximum.values())
    with path.open("w", encoding="utf-8", newline="") as file:
        table = csv.writer(file)
        table.writerow(["student", *questions, "autograded", "written", "total", "status",
                        "review"])
        table.writerow([POSSIBLE, *(f"{maximum[q]:.2f}" for q in questions), f"{auto:.2f}",
                        f"{written_maximum:.2f}", f"{auto + written_maximum:.2f}", "", ""])
        for name, row in graded.items():
            earned = [row.scores[q].points if q in row.scores else 0.0 for q in questions]
            marked = (written or {}).get(name)
            if not written_maximum:
                marked = 0.0
            total = "" if marked is None else f"{sum(earned) + marked:.2f}"
            table.writerow([name, *(f"{value:.2f}" for value in earned), f"{sum(earned):.2f}",
                            "" if marked is None else f"{marked:.2f}", total, row.status,
                            "; ".join((review or {}).get(name, []))])


def similar_written_answers(record: Record, assignment: Assignment) -> list[Match]:
    """Written answers much like their model answer or like another student's."""
    written = {q.name for q in assignment.questions if q.manual}
    given = {name: {q: text for q, text in sub.answers.items()
                    if q in written and q not in sub.unanswered}
             for name, sub in record.submissions.items()}
    models = {q.name: q.model for q in assignment.questions if q.manual}
    return similar_answers(given, models, record.threshold)


def write_folder(folder: Path, record: Record, assignment: Assignment) -> dict[str, list[str]]:
    """Write the record and every file made from it into ``folder``; the marks template only
    where there is none, so that marks being entered are never overwritten. Returns the
    review flags by student."""
    (folder / "feedback").mkdir(parents=True, exist_ok=True)
    save_record(folder, record)
    submissions = dict(sorted(record.submissions.items()))
    written = {name: written_total(record.marks.get(name, {}), assignment)
               for name in submissions}
    matches = similar_written_answers(record, assignment)
    similar = review_flags(matches, assignment.maximum(manual=True))
    # The grader's own flags (Graded.review) first, then the written answers much alike.
    review = {name: [*sub.graded.review, *similar.get(name, [])]
              for name, sub in submissions.items()}
    by_hand = assignment.maximum(manual=True)
    write_scores(folder / "grades.csv", {name: sub.graded for name, sub in submissions.items()},
                 assignment.maximum(manual=False), sum(by_hand.values()), written, review)
    for name, sub in submissions.items():
        (folder / "feedback" / f"{name}.txt").write_text(feedback_text(
            name, sub.graded, assignment, sub.unanswered, record.marks.get(name),
            written[name]), encoding="utf-8")
    if by_hand:
        page = answers_page(assignment, {name: sub.answers for name, sub in submissions.items()
                                         if sub.answers},
                            {name: sub.unanswered for name, sub in submissions.items()}, matches)
        (folder / "written-answers.html").write_text(page, encoding="utf-8")
        if (folder / TEMPLATE).exists():
            add_missing_rows(folder / TEMPLATE, submissions)
        else:
            (folder / TEMPLATE).write_text(marks_template(assignment, submissions),
                                           encoding="utf-8")
    return review


def add_missing_rows(marks_file: Path, students: Mapping[str, object]) -> None:
    """Add an empty row to the marks file for each graded student it lacks (a file graded
    late), leaving every row in it as it is."""
    with marks_file.open(encoding="utf-8-sig", newline="") as file:
        rows = list(csv.reader(file))
    if not rows:
        return
    missing = sorted(set(students) - {row[0].strip() for row in rows if row})
    text = marks_file.read_text(encoding="utf-8")
    with marks_file.open("a", encoding="utf-8", newline="") as file:
        if text and not text.endswith("\n"):
            file.write("\n")
        csv.writer(file, lineterminator="\n").writerows(
            [name, *[""] * (len(rows[0]) - 1)] for name in missing)


def save_record(folder: Path, record: Record) -> None:
    data = dataclasses.asdict(record)
    (folder / RECORD).write_text(json.dumps(data, indent=1, default=str) + "\n",
                                 encoding="utf-8")


def load_record(folder: Path) -> Record:
    """The record a class command kept in ``folder``."""
    from scripts.course.grading import Graded, Score  # the grader builds on this module

    path = folder / RECORD
    if not path.is_file():
        raise FileNotFoundError(f"{folder} holds no {RECORD}: grade the class into it first "
                                "with the class command")
    data = json.loads(path.read_text(encoding="utf-8"))

    def graded(row: dict[str, Any]) -> Graded:
        scores = {q: Score(**tupled(score)) for q, score in row.pop("scores").items()}
        return Graded(scores, **tupled(row))

    submissions = {name: Submission(graded(sub["graded"]), sub["answers"],
                                    tuple(sub["unanswered"]))
                   for name, sub in data["submissions"].items()}
    return Record(data["assignment"], submissions, data["marks"], data["threshold"])


def tupled(fields: dict[str, Any]) -> dict[str, Any]:
    """A dataclass's fields read back from JSON: its lists were tuples."""
    return {key: tuple(value) if isinstance(value, list) else value
            for key, value in fields.items()}
