"""Time class grading: how long a class of generated submissions takes, and how many a minute.

    python -m scripts.checks.bench_grading                 200 submissions, one worker per core
    python -m scripts.checks.bench_grading --count 40 --workers 2

The class is the fixture submissions (tests/fixtures/submissions/) copied in turn; the
autograder zip's build is timed apart from the grading, which uses the process pool of
``python -m scripts.course.grading class`` without Docker.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import nbformat

from scripts.course.grading import (
    FIXTURES_DIR,
    ROOT,
    build_autograder,
    choose_assignment,
    grade_in_pool,
    question_points,
    show_progress,
    write_scores,
)


def make_class(folder: Path, count: int) -> list[Path]:
    """``count`` submissions copied from the fixtures in turn, as student01.ipynb and so on."""
    fixtures = sorted((ROOT / FIXTURES_DIR).glob("*.ipynb"))
    if not fixtures:
        raise SystemExit(f"no fixture submissions in {FIXTURES_DIR}/")
    made = []
    for number in range(count):
        target = folder / f"student{number + 1:03d}-{fixtures[number % len(fixtures)].stem}.ipynb"
        shutil.copy(fixtures[number % len(fixtures)], target)
        made.append(target)
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200, help="submissions in the class")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--csv", type=Path, help="also keep the grades here")
    args = parser.parse_args(argv)
    if args.count < 1 or args.workers < 1:
        parser.error("--count and --workers must be at least 1")
    with tempfile.TemporaryDirectory(prefix="agentbook-bench-grading-") as scratch:
        submissions = make_class(Path(scratch), args.count)
        kinds = Counter(path.stem.split("-", 1)[1].split("-", 1)[0] for path in submissions)
        mix = ", ".join(f"{number} {kind}" for kind, number in sorted(kinds.items()))
        print(f"class: {args.count} submissions ({mix}); "
              f"{args.workers} workers on {os.cpu_count()} cores")
        started = time.perf_counter()
        autograder = build_autograder(ROOT, Path(scratch, "autograder"))
        built = time.perf_counter() - started
        print(f"otter assign (autograder zip): {built:.1f} s")
        started = time.perf_counter()
        scores = grade_in_pool(submissions, autograder, args.workers, show_progress)
        elapsed = time.perf_counter() - started
        print(file=sys.stderr)
        if args.csv:
            source = choose_assignment(ROOT, None)
            points = question_points(nbformat.read(source, as_version=4))
            write_scores(args.csv, scores, {q: v for q, (v, manual) in points.items()
                                            if not manual})
    print(f"graded {len(scores)} submissions in {elapsed:.1f} s: "
          f"{len(scores) / elapsed * 60:.1f} submissions per minute, "
          f"{elapsed / len(scores):.2f} s each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
