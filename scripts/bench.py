"""Time what the book's speed targets are about. Rerun it; quote medians.

    python -m scripts.bench chapter [--runs N]   execute each chapter (in a scratch copy)
    python -m scripts.bench tests [--runs N]     the whole pytest suite, after set-up
    python -m scripts.bench commands             both README commands on a fresh clone,
                                                 first run (set-up included) and repeat

Targets: the test suite under 30 s and a chapter under 10 s, after set-up. Machines are
shared and noisy, so this reports the median and the spread, never a single run.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from scripts.regenerate import ROOT, chapter_notebooks, execute


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def report(label: str, seconds: list[float]) -> None:
    spread = f"min {min(seconds):.2f} s, max {max(seconds):.2f} s" if len(seconds) > 1 else ""
    print(f"{label:40} median {statistics.median(seconds):6.2f} s  over {len(seconds)} run(s)"
          f"  {spread}", flush=True)


def bench_chapters(runs: int) -> None:
    """Execute each chapter where it cannot touch the repository (no figures/ beside it)."""
    with tempfile.TemporaryDirectory() as scratch:
        for notebook in chapter_notebooks(ROOT):
            copy = Path(scratch, "chapters", notebook.name)
            copy.parent.mkdir(exist_ok=True)
            seconds = []
            for _ in range(runs):
                shutil.copy(notebook, copy)
                seconds.append(timed(lambda copy=copy: execute(copy)))
            report(f"execute {notebook.relative_to(ROOT)}", seconds)


def bench_tests(runs: int) -> None:
    """The suite as `dev.py test` runs it (on every core), and on one core for comparison."""
    serial = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    for label, command in [("pytest -n auto (as dev.py test runs it)",
                            [*serial, "-n", "auto", "--dist", "loadfile"]),
                           ("pytest on one core", serial)]:
        seconds = [timed(lambda command=command: subprocess.run(
            command, cwd=ROOT, check=True, capture_output=True)) for _ in range(runs)]
        report(label, seconds)


def bench_commands(python: str) -> None:
    """Clone the committed book and time `dev.py test` and `dev.py book`, twice each."""
    with tempfile.TemporaryDirectory() as scratch:
        clone = Path(scratch, "agentbook")
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        for command in ("test", "book"):
            for attempt in ("first run", "repeat"):
                runs: list[subprocess.CompletedProcess[str]] = []
                seconds = timed(lambda command=command, runs=runs: runs.append(
                    subprocess.run([python, "dev.py", command], cwd=clone,
                                   capture_output=True, text=True)))
                report(f"python3 dev.py {command} ({attempt}, exit {runs[0].returncode})",
                       [seconds])
                if runs[0].returncode not in (0, 3):  # 3: rendered nothing, Quarto missing
                    print((runs[0].stdout + runs[0].stderr)[-3000:], flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["chapter", "tests", "commands"])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--python", default="python3", help="interpreter for the README commands")
    args = parser.parse_args(argv)
    if args.what == "chapter":
        bench_chapters(args.runs)
    elif args.what == "tests":
        bench_tests(args.runs)
    else:
        bench_commands(args.python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
