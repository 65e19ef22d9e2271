"""Regenerating the book from its chapters changes nothing that is committed.

The book is regenerated under two hash seeds, so that no output depends on the order in
which a set or a dict of strings happens to iterate. Each seed regenerates its own copy of
the book in its own test class: `python3 dev.py test` distributes test classes over the
cores (--dist loadscope), so the two regenerations, the slowest tests here, run side by side.
Both copies must come out identical to the committed tree, and so identical to each other.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


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
    done = subprocess.run([sys.executable, "-m", "scripts.regenerate"], cwd=book,
                          env=environment, capture_output=True, text=True)
    assert done.returncode == 0, f"regenerate failed under PYTHONHASHSEED={hash_seed}:\n" + (
        done.stdout + done.stderr)[-3000:]
    return git("status", "--porcelain", cwd=book)


class RegeneratingChangesNothing:
    """Regenerate the whole book under one hash seed; subclasses pick the seed."""

    hash_seed: str

    def test_regenerating_changes_nothing(self, book_copy: Path) -> None:
        changed = regenerate(book_copy, self.hash_seed)
        assert changed == "", f"PYTHONHASHSEED={self.hash_seed} changed:\n{changed}"


class TestUnderHashSeed0(RegeneratingChangesNothing):
    hash_seed = "0"


class TestUnderHashSeed4242(RegeneratingChangesNothing):
    hash_seed = "4242"
