"""The book's two commands. Run with any Python 3.11 or newer.

    python3 dev.py book    set up .venv, regenerate the package, outputs and
                           figures from the chapters, then render with Quarto
    python3 dev.py test    set up .venv, then run ruff, mypy and every test

Set-up creates a virtual environment in .venv and installs the pinned
requirements and the agentbook package into it. It is skipped when the
requirement files have not changed since the last set-up.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
REQUIREMENTS = {"book": "requirements.txt", "test": "requirements-dev.txt"}
QUARTO_HELP = (
    "Quarto is not available, so the book was not rendered to _book/.\n"
    "Everything else is regenerated: agentbook/, the chapters' stored outputs and figures/.\n"
    "To render, install the Quarto command-line tool (https://quarto.org/docs/get-started/)\n"
    "so that `quarto` is on PATH, then run `python3 dev.py book` again."
)


def venv_python() -> Path:
    scripts = "Scripts" if os.name == "nt" else "bin"
    return VENV / scripts / ("python.exe" if os.name == "nt" else "python")


def run(*command: str | Path) -> int:
    """Run a command from the repository root and return its exit status."""
    print("+", " ".join(str(part) for part in command), flush=True)
    return subprocess.call([str(part) for part in command], cwd=ROOT)


def setup_fingerprint(requirements: str) -> str:
    """A hash of everything that decides what set-up installs."""
    digest = hashlib.sha256()
    for name in ("requirements.txt", "requirements-dev.txt", "pyproject.toml", requirements):
        digest.update((ROOT / name).read_bytes())
    return digest.hexdigest()


def set_up(target: str) -> None:
    """Create .venv if needed and install what ``target`` needs into it."""
    if not venv_python().exists():
        print(f"creating {VENV.relative_to(ROOT)}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    requirements = REQUIREMENTS[target]
    stamp = VENV / f"setup-{target}.sha256"
    fingerprint = setup_fingerprint(requirements)
    if stamp.exists() and stamp.read_text() == fingerprint:
        return
    status = run(venv_python(), "-m", "pip", "install", "--disable-pip-version-check",
                 "--quiet", "-r", requirements, "-e", ".")
    if status != 0:
        sys.exit(status)
    stamp.write_text(fingerprint)


def book() -> int:
    """Regenerate everything the chapters produce, then render if Quarto is here."""
    set_up("book")
    status = run(venv_python(), "-m", "scripts.regenerate")
    if status != 0:
        return status
    quarto = shutil.which("quarto")
    if quarto is None:
        print(QUARTO_HELP, file=sys.stderr)
        return 3
    return run(quarto, "render")


def test() -> int:
    """Lint, type-check and run every test; fail if any of them fails."""
    set_up("test")
    python = venv_python()
    checks = {
        "ruff": (python, "-m", "ruff", "check", "."),
        "mypy": (python, "-m", "mypy"),
        "pytest": (python, "-m", "pytest"),
    }
    failed = [name for name, command in checks.items() if run(*command) != 0]
    if failed:
        print("failed:", ", ".join(failed), file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 11):  # noqa: UP036 - dev.py runs on whatever python3 is
        print("agentbook needs Python 3.11 or newer.", file=sys.stderr)
        return 2
    commands = {"book": book, "test": test}
    if len(argv) != 1 or argv[0] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    return commands[argv[0]]()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
