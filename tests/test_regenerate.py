"""Regenerating the book from its chapters changes nothing that is committed."""

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


def test_regenerating_twice_under_different_hash_seeds_changes_nothing(book_copy: Path) -> None:
    for seed in ("0", "4242"):
        environment = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-m", "scripts.regenerate"], cwd=book_copy,
                       env=environment, check=True, capture_output=True)
        changed = git("status", "--porcelain", cwd=book_copy)
        assert changed == "", f"PYTHONHASHSEED={seed} changed:\n{changed}"
