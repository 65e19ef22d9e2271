"""Hypothesis profiles for the property tests, and the book rendered once per full run.

``ci`` (the default) is deterministic and keeps nothing between runs: no
example database, and Hypothesis's caches go to a temporary directory that
is removed at exit, so the suite tries the same inputs every time and leaves
no files behind. ``thorough`` tries many more random inputs and keeps its
example database in .hypothesis/ (git ignores it); pick it with
HYPOTHESIS_PROFILE=thorough.
"""

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings

from scripts.build import live_book
from scripts.checks.measure_pages import find_chromium

settings.register_profile(
    "ci", max_examples=200, derandomize=True, deadline=None, print_blob=False, database=None
)
settings.register_profile("thorough", max_examples=5000, deadline=None)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)

if PROFILE == "ci":
    # Even without a database Hypothesis caches Unicode tables and constants on disk.
    _scratch = tempfile.TemporaryDirectory(prefix="agentbook-hypothesis-")
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", _scratch.name)


# --- The rendered book, once per test run ------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
# Not part of the book: left out of the copy that is rendered.
NOT_COPIED = (".git", ".venv", ".cache", "_book", ".quarto", "__pycache__", ".mypy_cache",
              ".ruff_cache", ".pytest_cache", ".hypothesis", "*.egg-info")
RENDER_TIMEOUT = 900  # seconds; a render takes about a minute on two shared cores
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def make_once(tmp_path_factory: pytest.TempPathFactory, name: str,
              make: Callable[[Path], None]) -> Path:
    """A folder that ``make`` fills once for the whole run, however many workers ask for it.

    pytest-xdist's workers share the parent of their temporary folders; they take turns at
    a lock, and only the first finds the folder unmade.
    """
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, done = shared / name, shared / f"{name}.done"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def made_once(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``made_once(name, make)``: the folder ``make`` filled once for the whole run."""
    return lambda name, make: make_once(tmp_path_factory, name, make)


def render_book(folder: Path) -> None:
    """Render a copy of the sources in ``folder``/src, keeping Quarto's log beside it."""
    quarto = shutil.which("quarto")
    assert quarto is not None
    # The pinned npm packages go into this checkout's live/, as a render here would put them:
    # the copy takes them from there, and axe-core (scripts/checks/accessibility.py) is found.
    live_book.install_packages()
    source = folder / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_COPIED))
    # Every format's diagrams are drawn by Chromium (rendered_book skips without it).
    environment = dict(os.environ, QUARTO_CHROMIUM=find_chromium() or "",
                       QUARTO_CHROMIUM_HEADLESS_MODE="new")
    finished = subprocess.run([quarto, "render"], cwd=source, capture_output=True,
                              text=True, timeout=RENDER_TIMEOUT, env=environment)
    log = ANSI.sub("", finished.stdout + finished.stderr)
    assert finished.returncode == 0, log
    (folder / "render.log").write_text(log, encoding="utf-8")


# The full suite renders the book and reads it in Chromium: `python3 dev.py test --full` sets
# this variable, which pytest run by hand may set too. Without it those tests skip.
FULL_SUITE = "AGENTBOOK_FULL"


@pytest.fixture(scope="session")
def full_suite() -> None:
    """Skips a test outside the full suite: one that renders the book, drives Chromium,
    regenerates the whole book a second time, walks the instructors' appendix or waits out
    a submission's deadline or a hang in C code."""
    if os.environ.get(FULL_SUITE) != "1":
        pytest.skip("the quick suite does not render the book, open Chromium, regenerate "
                    "the book under a second hash seed, walk the instructors' appendix or "
                    "wait out a submission's deadline or a hang in C code; "
                    "`python3 dev.py test --full` does (README.md, \"The two commands\")")


@pytest.fixture(scope="session")
def rendered_book(tmp_path_factory: pytest.TempPathFactory,
                  full_suite: None) -> tuple[Path, str]:
    """The book rendered from a copy of the sources: its _book folder and Quarto's log.

    Rendered once for the whole run: the test files that read the book share it. The quick
    suite skips every test that needs it; the full suite fails where it cannot render.
    """
    if shutil.which("quarto") is None:
        pytest.fail("quarto is not on PATH, so the full suite cannot render the book "
                    "(README.md says where Quarto comes from)")
    if find_chromium() is None:
        pytest.fail("Chromium is not on PATH (or $CHROMIUM), and Quarto draws the book's "
                    "diagrams with it")
    folder = make_once(tmp_path_factory, "book", render_book)
    return folder / "src" / "_book", (folder / "render.log").read_text(encoding="utf-8")
