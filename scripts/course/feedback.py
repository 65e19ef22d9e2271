"""What a student is given back: their score on every question and overall, each against
its maximum, and what to look at where they lost points.

It holds the messages of the failed public tests (which the student saw in their notebook
anyway), one sentence for each failed hidden test saying what it checks, and the error of any
cell that raised. It never names a hidden test or shows a line of one: every line is cleared
of hidden tests' names and cut at a word to a readable length.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from scripts.course.answers import Assignment
from scripts.course.integrity import MESSAGE_CHARACTERS, cut

if TYPE_CHECKING:
    from scripts.course.grading import Graded, Score

LINE_LIMIT = MESSAGE_CHARACTERS  # characters of one message, cut at a word
HIDDEN_PREFIX = re.compile(r"^\s*hidden test:\s*", re.I)


def cut_at_word(text: str, limit: int = LINE_LIMIT) -> str:
    """``text`` on one line, its indent kept, cut at a word (integrity.cut)."""
    indent = text[:len(text) - len(text.lstrip(" "))]
    return indent + cut(text, limit)


def without_hidden_names(text: str, hidden_tests: Collection[str]) -> str:
    """``text`` with every hidden test's name replaced by the words 'a hidden test'."""
    for name in sorted(hidden_tests, key=len, reverse=True):
        text = text.replace(f"(test {name})", "(a hidden test)").replace(name, "a hidden test")
    return text


def status_parts(status: str, questions: Collection[str]) -> list[str]:
    """A status cut into the notes it joins with '; ', each starting with a question's name
    (or its start, where a long status was cut short), a cell's, or a kind of outcome: a
    note's own text may hold '; ' too."""
    starts = "|".join([*map(re.escape, questions), r"[a-z]+_q\w", "cell ", "not graded",
                       "not scored", "not answered", "unreadable"])
    return [part for part in re.split(rf"; (?=(?:{starts}))", status) if part]


def points(value: float) -> str:
    return f"{value:.2f}"


def summary_lines(autograded: float, maximum: float, written: float | None,
                  written_maximum: float) -> list[str]:
    """The score overall: autograded, written and total, each out of its own maximum."""
    lines = [f"autograded: {points(autograded)} of {points(maximum)}"]
    if written_maximum:
        if written is None:
            lines += [f"written: not marked yet, of {points(written_maximum)}",
                      f"total: given once the written answers are marked, of "
                      f"{points(maximum + written_maximum)}"]
        else:
            lines += [f"written: {points(written)} of {points(written_maximum)}",
                      f"total: {points(autograded + written)} of "
                      f"{points(maximum + written_maximum)}"]
    return lines


def question_lines(question: str, score: Score | None, maximum: float, graded: Graded,
                   unanswered: bool) -> list[str]:
    """One autograded question: its score against its maximum, then why points were lost."""
    got = points(score.points) if score else "not graded"
    if unanswered:
        return [f"{question}: {got} of {points(maximum)}, not answered"]
    lines = [f"{question}: {got} of {points(maximum)}"]
    if question in graded.cell_errors:  # the tests' messages would only be its symptoms
        return [*lines, f"  your {graded.cell_errors[question]}; the tests of this question "
                        "could not use your answer: fix that cell and check again"]
    public = [message.rsplit("Error: ", 1)[-1] for message in (
        score.public_messages if score else ())]
    hidden = [HIDDEN_PREFIX.sub("", message) for message in (
        score.hidden_messages if score else ())]
    lines += [f"  public test: {message}" for message in dict.fromkeys(public)]
    lines += [f"  hidden test: {message}" for message in dict.fromkeys(hidden)]
    return lines


def feedback_text(name: str, graded: Graded, assignment: Assignment,
                  unanswered: Collection[str] = (),
                  marks: Mapping[str, float] | None = None,
                  written: float | None = None) -> str:
    """The feedback file of one student: ``marks`` are their written marks by question (or
    one total), ``written`` their written points once fully marked."""
    autograded, by_hand = assignment.maximum(manual=False), assignment.maximum(manual=True)
    earned = sum(graded.scores[q].points for q in autograded if q in graded.scores)
    lines = [f"Feedback for {name} on {assignment.name}", "",
             *summary_lines(earned, sum(autograded.values()), written, sum(by_hand.values())),
             "", "Autograded questions, each against its maximum:"]
    for question, maximum in autograded.items():
        lines += question_lines(question, graded.scores.get(question), maximum, graded,
                                question in unanswered)
    marks = marks or {}
    if by_hand and not (written is not None and not any(q in marks for q in by_hand)):
        # Per question, unless the written answers were marked with one total.
        lines += ["", "Written questions, marked by hand:"]
        lines += [f"{q}: {points(marks[q]) if q in marks else 'not marked yet,'} of "
                  f"{points(m)}{', not answered' * (q in unanswered)}" for q, m in by_hand.items()]
    notes = [part for part in status_parts(graded.status, [*autograded, *by_hand])
             if part != "ok" and not part.startswith(("not answered", *autograded))]
    if notes:
        lines += ["", *(f"note from grading: {note}" for note in notes)]
    return "\n".join(cut_at_word(without_hidden_names(line, assignment.hidden_tests))
                     for line in lines) + "\n"
