"""Written answers that read nearly the same as the model answer, or as another student's.

Each answer is cut into its three-word phrases, lower-cased, punctuation and Markdown dropped.
Two answers are compared by the share of the shorter one's phrases found in the other: an
answer copied whole scores 100%, one copied and lightly edited still scores high, and two
answers written apart rarely share more than a few phrases, even on the same question in the
same words of the chapter. Short answers are left out: a one-line prediction may match by
right. A match is a reason to read the answers side by side, never a penalty.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

WORD = re.compile(r"[a-z0-9_]+")
PHRASE_WORDS = 3
THRESHOLD = 0.5  # the share of the shorter answer's phrases found in the other
MIN_WORDS = 15  # answers shorter than this are never flagged
MODEL = "the model answer"


def phrases(text: str) -> frozenset[tuple[str, ...]]:
    """Every run of three consecutive words in ``text``, lower-cased."""
    words = WORD.findall(text.lower())
    return frozenset(zip(*(words[start:] for start in range(PHRASE_WORDS)), strict=False))


def shared(first: frozenset[tuple[str, ...]], second: frozenset[tuple[str, ...]]) -> float:
    """The share of the smaller set of phrases that the other holds too (0 when one is empty)."""
    if not first or not second:
        return 0.0
    return len(first & second) / min(len(first), len(second))


@dataclass(frozen=True)
class Match:
    """One written answer much like another text: the model answer, or a classmate's."""

    student: str
    question: str
    like: str  # "the model answer", or the other student's name
    share: float


def similar_answers(answers: Mapping[str, Mapping[str, str]], models: Mapping[str, str],
                    threshold: float = THRESHOLD, min_words: int = MIN_WORDS) -> list[Match]:
    """Every written answer (student -> question -> text) that shares at least
    ``threshold`` of its phrases with its question's model answer or with another student's
    answer; a pair of students gives a match for each. Give only answers a student wrote,
    not ones left as handed out."""
    matches: list[Match] = []
    for question in sorted({q for by_question in answers.values() for q in by_question}):
        cut = {student: phrases(by_question[question])
               for student, by_question in sorted(answers.items())
               if len(WORD.findall(by_question.get(question, "").lower())) >= min_words}
        model = phrases(models.get(question, ""))
        matches += [Match(student, question, MODEL, share) for student, own in cut.items()
                    if (share := shared(own, model)) >= threshold]
        for (first, one), (second, other) in itertools.combinations(cut.items(), 2):
            if (share := shared(one, other)) >= threshold:
                matches += [Match(first, question, second, share),
                            Match(second, question, first, share)]
    return matches


def review_flags(matches: list[Match], questions: Collection[str] = ()) -> dict[str, list[str]]:
    """The matches as review flags by student, one for each text their answers are like:
    'like the model answer in q1a, q1c (100%)', 'like bo's answer in q2c (83%)', or 'in every
    written question' where they match in all of ``questions``."""
    grouped: dict[str, dict[str, list[Match]]] = {}
    for match in matches:
        grouped.setdefault(match.student, {}).setdefault(match.like, []).append(match)
    flags: dict[str, list[str]] = {}
    for student, by_text in grouped.items():
        for like, found in by_text.items():
            low, high = min(m.share for m in found), max(m.share for m in found)
            shares = f"{high:.0%}" if f"{low:.0%}" == f"{high:.0%}" else f"{low:.0%} to {high:.0%}"
            text = like if like == MODEL else f"{like}'s answer"
            where = (", ".join(m.question.split("_", 1)[-1] for m in found)
                     if {m.question for m in found} != set(questions)
                     else "every written question")
            flags.setdefault(student, []).append(f"like {text} in {where} ({shares})")
    return flags
