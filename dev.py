"""The book's two commands. Run with any Python 3.11 or newer.

    python3 dev.py book    set up .venv, regenerate the package, outputs, figures
                           and the student exercises from the sources, then render
                           with Quarto (from PATH, or pip-installed into .venv when
                           it can be)
    python3 dev.py test    set up .venv, then run ruff, mypy and every test

Set-up creates a virtual environment in .venv and installs the pinned
requirements (requirements-dev.txt, which includes requirements.txt) and the
agentbook package into it. Both commands share it, and set-up is skipped when
the requirement files have not changed since the last time.
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
REQUIREMENTS = "requirements-dev.txt"
SETUP_STAMP = VENV / "setup.sha256"
# The Quarto that `book` installs into .venv when none is on PATH. The quarto-cli package
# downloads Quarto's binary from GitHub while it installs, so it fails where that is blocked.
QUARTO_CLI = "quarto-cli==1.10.19"
QUARTO_INSTALL_TIMEOUT = 600  # seconds; the binary is large, but a blocked download must end
# The package's own `quarto` script drops the exit status; find the binary it wraps instead.
FIND_QUARTO = "import pathlib, quarto_cli; print(pathlib.Path(quarto_cli.__file__).parent / 'bin')"
QUARTO_HELP = (
    "Missing: Quarto, so the book was not rendered to _book/.\n"
    f"`quarto` is not on PATH, and `pip install {QUARTO_CLI}` into .venv failed (that package\n"
    "downloads the Quarto binary from GitHub while it installs).\n"
    "Everything else is regenerated: agentbook/, the stored outputs, figures/ and exercises/.\n"
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


def setup_fingerprint() -> str:
    """A hash of everything that decides what set-up installs."""
    digest = hashlib.sha256()
    for name in ("requirements.txt", "requirements-dev.txt", "pyproject.toml"):
        digest.update((ROOT / name).read_bytes())
    return digest.hexdigest()


def set_up() -> None:
    """Create .venv if needed and install the pinned requirements and the package."""
    if not venv_python().exists():
        print(f"creating {VENV.relative_to(ROOT)}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    fingerprint = setup_fingerprint()
    if SETUP_STAMP.exists() and SETUP_STAMP.read_text() == fingerprint:
        return
    status = run(venv_python(), "-m", "pip", "install", "--disable-pip-version-check",
                 "--quiet", "-r", REQUIREMENTS, "-e", ".")
    if status != 0:
        sys.exit(status)
    SETUP_STAMP.write_text(fingerprint)


def venv_quarto() -> str | None:
    """The Quarto binary the quarto-cli package put in .venv, if it is there and runs."""
    found = subprocess.run([venv_python(), "-c", FIND_QUARTO], capture_output=True, text=True)
    if found.returncode != 0:
        return None
    binary = shutil.which("quarto", path=found.stdout.strip())
    if binary is None or subprocess.run([binary, "--version"], capture_output=True).returncode:
        return None
    return binary


def install_quarto() -> str | None:
    """Try to pip-install Quarto into .venv; return its binary, or None where that fails.

    --no-deps: what quarto-cli needs (jupyter, nbclient) is pinned in requirements.txt
    already, and installing it must not move those pins.
    """
    command = [str(venv_python()), "-m", "pip", "install", "--disable-pip-version-check",
               "--quiet", "--no-deps", "--timeout", "30", "--retries", "0", QUARTO_CLI]
    print("+", " ".join(command), flush=True)
    try:
        installed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                                   timeout=QUARTO_INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired:
        print(f"gave up after {QUARTO_INSTALL_TIMEOUT} s", file=sys.stderr)
        return None
    if installed.returncode != 0:
        # pip's own report is a long traceback; its one telling line is the failed download.
        reasons = [line.strip() for line in installed.stdout.splitlines()
                   + installed.stderr.splitlines() if "Error downloading" in line]
        print((reasons or installed.stderr.strip().splitlines() or ["pip failed"])[-1],
              file=sys.stderr)
        return None
    return venv_quarto()


def book() -> int:
    """Regenerate everything the chapters produce, then render if Quarto is here or can be."""
    set_up()
    for step in ("scripts.regenerate", "scripts.exercises", "scripts.readers"):
        status = run(venv_python(), "-m", step)
        if status != 0:
            return status
    quarto = shutil.which("quarto") or venv_quarto() or install_quarto()
    if quarto is None:
        print(QUARTO_HELP, file=sys.stderr)
        return 3
    return run(quarto, "render")


def test() -> int:
    """Lint, type-check and run every test; fail if any of them fails."""
    set_up()
    python = venv_python()
    checks = {
        "ruff": (python, "-m", "ruff", "check", "."),
        "mypy": (python, "-m", "mypy"),
        # One worker per core; each file, and so each notebook's kernel, stays on one worker.
        "pytest": (python, "-m", "pytest", "-n", "auto", "--dist", "loadfile"),
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
