"""Hypothesis profiles for the property tests, and how the suite is spread over the cores.

``ci`` (the default) is deterministic and keeps nothing between runs: no
example database, and Hypothesis's caches go to a temporary directory that
is removed at exit, so the suite tries the same inputs every time and leaves
no files behind. ``thorough`` tries many more random inputs and keeps its
example database in .hypothesis/ (git ignores it); pick it with
HYPOTHESIS_PROFILE=thorough.
"""

import os
import tempfile
from typing import Any

import pytest
from hypothesis import settings

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
# fixture submission takes about two seconds, so fifteen of them, handed out one at a time
# after the long files, even out what those left uneven.

SPREAD_FILES = ("tests/test_grading.py",)
SLOWEST_FIRST = ("tests/test_real_models.py", "tests/test_properties.py",
                 "tests/test_regenerate.py", "chapters/01_anatomy.ipynb", "tests/test_render.py",
                 "chapters/", "tests/test_grading.py")


def slowness_rank(nodeid: str) -> int:
    ranks = [rank for rank, prefix in enumerate(SLOWEST_FIRST) if nodeid.startswith(prefix)]
    return ranks[0] if ranks else len(SLOWEST_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A stable sort: within a file, and so within a notebook, the order stays as written.
    items.sort(key=lambda item: slowness_rank(item.nodeid))


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
