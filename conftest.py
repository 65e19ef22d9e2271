"""How the whole suite runs: one hash seed for every process, spread over the cores.

This file sits at the top of the repository so that it applies however pytest is pointed at
the book, at `tests/`, at `chapters/` or at both; it imports nothing beyond pytest, so a
plain `python -m pytest --nbval chapters/01_anatomy.ipynb` works where only pytest and nbval
are installed, as on Binder.
"""

import os
from typing import Any

import pytest

# Every process the suite starts, nbval's kernels among them, hashes strings the same way on
# every run, so a failure reproduces. tests/test_regenerate.py checks a second seed.
os.environ["PYTHONHASHSEED"] = "0"


# ---------------------------------------------------------------------------------------------
# Spreading the suite over the cores
#
# `python3 dev.py test` runs pytest with one worker per core and --dist loadscope, which keeps
# a file's tests (and so each notebook's kernel) on one worker. Two refinements keep both
# cores busy to the end. The slowest files, as `pytest --durations` shows them, are handed out
# first, longest first. And each test in SPREAD_FILES is a unit of its own: grading one
# fixture submission takes about two seconds, so the fixtures, handed out one at a time
# after the long files, even out what those left uneven; the sandbox's attempts, a few
# hundredths of a second each, are independent of one another too.

SPREAD_FILES = ("tests/test_grading.py", "tests/test_sandbox.py")
# First of all, one test that needs the autograder zips, so that one worker builds them (about
# 8 s of otter assign, where .cache/ has no build of the same inputs: tests/test_grading.py)
# while the other starts on the long files; built later, when both workers reach the
# grading tests, the other worker would wait for them idle. The longest
# grading tests (a class, Gradescope's layout, the instructor's walk) go out next, once the
# zips are likely built.
SLOWEST_FIRST = ("tests/test_grading.py::test_committed_student_version_is_current",
                 "tests/test_real_models.py", "tests/test_grading.py::test_a_class_with",
                 "tests/test_grading.py::test_gradescope_grades", "tests/test_instructors.py",
                 "tests/test_properties.py",
                 "tests/test_regenerate.py", "chapters/01_anatomy.ipynb", "tests/test_render.py",
                 "chapters/", "tests/test_grading.py")


def slowness_rank(nodeid: str) -> int:
    ranks = [rank for rank, prefix in enumerate(SLOWEST_FIRST) if nodeid.startswith(prefix)]
    return ranks[0] if ranks else len(SLOWEST_FIRST)


# The full suite (`dev.py test --full`) renders the book once: the file that renders it goes
# first, so that one worker renders while the other starts on the rest, and the other files
# that read the book go last, so that no worker waits for the render while other tests remain.
RENDERS_FIRST = "tests/test_render.py"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    full = os.environ.get("AGENTBOOK_FULL") == "1"
    reading = {item.nodeid.split("::")[0] for item in items
               if full and "rendered_book" in getattr(item, "fixturenames", ())}

    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::")[0]
        if full and path == RENDERS_FIRST:
            return -1
        return len(SLOWEST_FIRST) + 1 if path in reading else slowness_rank(item.nodeid)

    # A stable sort: within a file, and so within a notebook, the order stays as written.
    items.sort(key=rank)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    # Plain `-n N` means xdist's "load", which would scatter a notebook's cells over workers,
    # each cell in a kernel of its own; scopes keep them together in that case too.
    if config.getoption("dist") not in ("load", "loadscope"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SpreadingScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(SPREAD_FILES):
                return nodeid
            return super()._split_scope(nodeid)

    # dev.py also passes --no-loadscope-reorder: units go out in the order sorted above.
    return SpreadingScheduling(config, log)
