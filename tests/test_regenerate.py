"""Regenerating the book from its chapters changes nothing that is committed.

No output may depend on the order in which a set or a dict of strings happens to iterate, so
every output is checked under two hash seeds. nbval executes each chapter under seed 0 (the
repository's conftest.py sets it for every process the suite starts) and compares every
output, figures and run data included, with the stored one. This test regenerates a copy of
the whole book under seed 4242, the package and the written figure files too, and requires
it to come out identical to the committed tree. It executes every chapter a second time, a
quarter of the quick suite's time, so it belongs to the full suite (`python3 dev.py test
--full`, which CI runs); the quick suite checks seed 0 only.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
REGENERATION_HASH_SEED = "4242"


def git(*args: str, cwd: Path) -> str:
    command = ["git", "-c", "user.name=agentbook", "-c", "user.email=agentbook@localhost", *args]
    return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def book_copy(tmp_path: Path) -> Path:
    """The working tree's files (committed or not, minus ignored ones) in a fresh repository."""
    listed = git("ls-files", "--cached", "--others", "--exclude-standard", "-z", cwd=REPO_ROOT)
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():
            target = tmp_path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    git("init", "--quiet", cwd=tmp_path)
    git("add", "--all", cwd=tmp_path)
    git("commit", "--quiet", "--message", "snapshot", cwd=tmp_path)
    return tmp_path


def regenerate(book: Path, hash_seed: str) -> str:
    """Regenerate a copy of the book under a hash seed; return what git says changed."""
    environment = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run([sys.executable, "-m", "scripts.build.regenerate"], cwd=book,
                          env=environment, capture_output=True, text=True)
    assert done.returncode == 0, f"regenerate failed under PYTHONHASHSEED={hash_seed}:\n" + (
        done.stdout + done.stderr)[-3000:]
    return git("status", "--porcelain", cwd=book)


def test_regenerating_under_another_hash_seed_changes_nothing(full_suite: None,
                                                              book_copy: Path) -> None:
    changed = regenerate(book_copy, REGENERATION_HASH_SEED)
    assert changed == "", f"PYTHONHASHSEED={REGENERATION_HASH_SEED} changed:\n{changed}"
