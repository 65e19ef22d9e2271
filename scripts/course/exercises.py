"""Build the student version of each chapter's exercises with otter-grader.

    python -m scripts.course.exercises                 write the student versions
    python -m scripts.course.exercises --check         exit 1 with a diff when they are stale
    python -m scripts.course.exercises --autograder D  also keep the autograder versions in D
        [--cell-timeout SECONDS] [--test-timeout SECONDS]  the zips' limits (default 300, 10)

``otter assign`` turns each annotated ``exercises/source/NAME.ipynb`` into the committed
student version ``exercises/NAME.ipynb`` (its public tests in ``exercises/tests/`` and packed
into its ``PUBLIC_TESTS`` line, so ``grader.check`` works anywhere) and the autograder
version, rebuilt when needed. A solution that fails its own tests stops the build.

With AGENTBOOK_SKIP_SOLUTION_RUN=1 in the environment, otter's own run of the solutions
against their tests is left out: the test suite sets it where it grades the correct
submission against the zips it builds, which checks the same and more.
"""

from __future__ import annotations

import argparse
import base64
import bz2
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from scripts.build.generated import diff as diff  # the student files' diff and write, too
from scripts.build.generated import read_files, sync
from scripts.build.generated import write as write
from scripts.build.regenerate import KERNELSPEC
from scripts.course.integrity import digest
from scripts.course.run_otter import CELL_SECONDS, SETTINGS_FILE, TEST_SECONDS
from scripts.course.time_limit import with_time_limit

ROOT = Path(__file__).resolve().parents[2]
EXERCISES_DIR = "exercises"
SOURCE_DIR = "exercises/source"
TESTS_DIR = "exercises/tests"
# The grading code every autograder zip carries beside its run_otter.py (run_otter.py says why).
ENGINE = ("run_otter.py", "kernel_bound.py", "kernel_sandbox.py", "integrity.py",
          "time_limit.py")
# The line of the student notebook's set-up cell that receives the packed public tests.
BUNDLE_LINE = 'PUBLIC_TESTS = ""'
BUNDLE_WIDTH = 88  # characters of base64 per line, so the cell stays within the line length
SKIP_SOLUTION_RUN = "AGENTBOOK_SKIP_SOLUTION_RUN"


class ExercisesError(Exception):
    """The student versions could not be built; the message says which notebook and why."""


def source_notebooks(root: Path) -> list[Path]:
    """The annotated exercise notebooks, in file-name order."""
    return sorted((root / SOURCE_DIR).glob("*.ipynb"))


def run_otter_assign(source: Path, output: Path, check_solutions: bool = True) -> None:
    """Run ``otter assign`` on one source notebook into ``output``, its scratch files too;
    ``check_solutions=False`` skips grading the solutions, for a caller that grades them."""
    scratch = output / "scratch"
    scratch.mkdir(parents=True)
    command = [sys.executable, "-m", "otter", "assign", str(source), str(output / "dist")]
    if not check_solutions:
        command.append("--no-run-tests")
    completed = subprocess.run(command, capture_output=True, text=True,
                               env={**os.environ, "TMPDIR": str(scratch)})
    if completed.returncode != 0:
        report = (completed.stdout + completed.stderr).strip()
        raise ExercisesError(
            f"otter assign failed for {source.name}; every solution must pass its own tests.\n"
            f"{report}"
        )


def harden(dist: Path) -> None:
    """What ``otter assign`` wrote into ``dist``, made to survive students' bugs on every path:
    every test file, the student's and the autograder's, runs each test within the default
    time limit (scripts/course/time_limit.py)."""
    for path in [*(dist / "student").glob("tests/*.py"), *(dist / "autograder").glob("tests/*.py")]:
        path.write_text(with_time_limit(path.read_text(encoding="utf-8")), encoding="utf-8")


@dataclass(frozen=True)
class ZipLimits:
    """The limits an autograder zip grades with, chosen when it is built."""

    cell_seconds: float = CELL_SECONDS  # the longest any one cell may run
    test_seconds: float = TEST_SECONDS  # the longest any one test may run


def pack_autograder(dist: Path, student_notebook: str, limits: ZipLimits = ZipLimits()) -> None:
    """Each autograder zip in ``dist`` made to grade as the class command does: it runs this
    book's run_otter.py with the grading code beside it (``ENGINE``), its test files run each
    test within ``limits.test_seconds``, its settings file holds the limits and the starter
    notebook's code cells (what is left as handed out is not scanned for tampering). Hidden
    tests' results stay hidden from students, as otter has it, unless the assignment config
    says ``show_hidden: true`` under ``generate``."""
    here = Path(__file__).parent
    engine = {name: (here / name).read_text(encoding="utf-8") for name in ENGINE}
    starter = sorted({digest(cell.source) for cell in
                      nbformat.reads(student_notebook, as_version=4).cells
                      if cell.cell_type == "code"})
    settings = {"cell_seconds": limits.cell_seconds, "test_seconds": limits.test_seconds,
                "starter_cells": starter}
    for archive in (dist / "autograder").glob("*.zip"):
        with zipfile.ZipFile(archive) as old:
            entries = [(info, old.read(info)) for info in old.infolist()]
        stamp = entries[0][0].date_time  # the new files dated as otter dated its own
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as new:
            for info, data in entries:
                if info.filename.startswith("tests/") and info.filename.endswith(".py"):
                    data = with_time_limit(data.decode("utf-8"),
                                           limits.test_seconds).encode("utf-8")
                elif info.filename in engine:
                    data = engine.pop(info.filename).encode("utf-8")
                new.writestr(info, data)
            for name, text in engine.items():  # beside run_otter.py, as otter wrote it
                new.writestr(zipfile.ZipInfo(name, date_time=stamp), text)
            new.writestr(zipfile.ZipInfo(SETTINGS_FILE, date_time=stamp),
                         json.dumps(settings, indent=2))


def stable_ids(notebook: nbformat.NotebookNode, source_ids: set[str]) -> None:
    """Name each cell otter adds (random id) after the nearest source cell above it."""
    anchor, count, used = "start", 0, set()
    for cell in notebook.cells:
        if cell.get("id") in source_ids and cell.id not in used:
            anchor, count = cell.id, 0
        else:
            count += 1
            cell.id = f"{anchor}-otter-{count}"
        used.add(cell.id)


def normalize(text: str, source_ids: set[str]) -> str:
    """The student notebook with only the metadata that does not vary between machines."""
    notebook = nbformat.reads(text, as_version=4)
    notebook.metadata = nbformat.NotebookNode({"kernelspec": KERNELSPEC})
    stable_ids(notebook, source_ids)
    nbformat.validate(notebook)
    return str(nbformat.writes(notebook)) + "\n"  # as nbformat.write ends a file


def pack_tests(tests: dict[str, str]) -> str:
    """The public tests as base64 of bz2-compressed JSON, file name -> text (bz2, unlike
    zlib, gives the same bytes on every machine)."""
    data = json.dumps(tests, sort_keys=True).encode("utf-8")
    return base64.b64encode(bz2.compress(data, 9)).decode("ascii")


def unpack_tests(packed: str) -> dict[str, str]:
    """The inverse of ``pack_tests``: what the student notebook's set-up cell does."""
    tests: dict[str, str] = json.loads(bz2.decompress(base64.b64decode(packed)))
    return tests


def bundle_tests(notebook_text: str, tests: dict[str, str]) -> str:
    """The student notebook with its public tests packed into the ``PUBLIC_TESTS`` line."""
    notebook = nbformat.reads(notebook_text, as_version=4)
    holders = [cell for cell in notebook.cells
               if cell.cell_type == "code" and BUNDLE_LINE in cell.source.splitlines()]
    if len(holders) != 1:
        raise ExercisesError(
            f"the student notebook needs exactly one line `{BUNDLE_LINE}` to hold its public "
            f"tests; found {len(holders)}"
        )
    packed = pack_tests(tests)
    chunks = [packed[i:i + BUNDLE_WIDTH] for i in range(0, len(packed), BUNDLE_WIDTH)]
    value = "PUBLIC_TESTS = (\n" + "".join(f'    "{chunk}"\n' for chunk in chunks) + ")"
    [holder] = holders
    holder.source = holder.source.replace(BUNDLE_LINE, value)
    return str(nbformat.writes(notebook)) + "\n"  # as nbformat.write ends a file


def build(root: Path, autograder: Path | None = None,
          check_solutions: bool = True, limits: ZipLimits = ZipLimits()) -> dict[str, str]:
    """Every student file the sources produce: path relative to ``root`` -> file text."""
    files: dict[str, str] = {}
    made_by: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="agentbook-exercises-") as scratch:
        for source in source_notebooks(root):
            output = Path(scratch, source.stem)
            run_otter_assign(source, output, check_solutions)
            harden(output / "dist")
            source_ids = {cell.get("id") for cell in nbformat.read(source, as_version=4).cells}
            student = output / "dist" / "student"
            for path in sorted(p for p in student.rglob("*") if p.is_file()):
                relative = f"{EXERCISES_DIR}/{path.relative_to(student).as_posix()}"
                if relative in made_by:
                    raise ExercisesError(
                        f"{source.name} and {made_by[relative]} both write {relative}; "
                        "give their questions different names"
                    )
                made_by[relative] = source.name
                text = path.read_text(encoding="utf-8")
                files[relative] = normalize(text, source_ids) if path.suffix == ".ipynb" else text
            tests = {path.name: path.read_text(encoding="utf-8")
                     for path in sorted((student / "tests").glob("*.py"))}
            notebook = f"{EXERCISES_DIR}/{source.stem}.ipynb"
            files[notebook] = bundle_tests(files[notebook], tests)
            if autograder is not None:
                pack_autograder(output / "dist", files[notebook], limits)
                target = autograder / source.stem
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(output / "dist" / "autograder", target)
                # otter names the zip after the time it was built; a name that stays put
                # can be written in a course's own notes and commands.
                [archive] = target.glob("*.zip")
                archive.rename(autograder_zip(autograder, source.stem))
    return files


def autograder_zip(folder: Path, name: str) -> Path:
    """Where the build keeps assignment ``name``'s autograder zip, under ``folder``."""
    return folder / name / f"{name}-autograder.zip"


def committed_files(root: Path, wanted: dict[str, str]) -> dict[str, str]:
    """The committed student files: every notebook in exercises/ and everything in its tests/
    (all generated, so one that no source produces any more is stale too)."""
    found = [*(root / EXERCISES_DIR).glob("*.ipynb"), *(root / TESTS_DIR).rglob("*")]
    return read_files(root, [*wanted, *(path.relative_to(root).as_posix() for path in found)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="fail with a diff when the committed student versions are stale")
    parser.add_argument("--autograder", type=Path, metavar="DIR",
                        help="also keep each autograder version, zip included, in DIR/NAME/")
    parser.add_argument("--cell-timeout", type=float, default=CELL_SECONDS, metavar="SECONDS",
                        help="with --autograder: the longest any one cell may run when the zip "
                        f"grades (default {CELL_SECONDS}); a cell stopped costs its question")
    parser.add_argument("--test-timeout", type=float, default=TEST_SECONDS, metavar="SECONDS",
                        help="with --autograder: the longest any one test may run when the zip "
                        f"grades (default {TEST_SECONDS})")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if not source_notebooks(root):
        print(f"no exercise notebooks in {SOURCE_DIR}/", file=sys.stderr)
        return 2
    autograder = args.autograder.resolve() if args.autograder else None
    try:
        wanted = build(root, autograder, os.environ.get(SKIP_SOLUTION_RUN) != "1",
                       ZipLimits(args.cell_timeout, args.test_timeout))
    except ExercisesError as error:
        print(error, file=sys.stderr)
        return 2
    if args.autograder:
        print("the autograder zips (the hidden tests are inside: keep them from students):")
        for source in source_notebooks(root):
            print(f"  {autograder_zip(args.autograder, source.stem)}")
    return sync(root, wanted, committed_files(root, wanted), args.check,
                "student exercises", "python -m scripts.course.exercises")


if __name__ == "__main__":
    sys.exit(main())
