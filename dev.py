"""The book's two commands. Run with any Python 3.11 or newer.

    python3 dev.py book    set up .venv, measure Chapter 3's defenses on AgentDojo,
                           and Chapter 4's MCP call cost and frameworks' imports,
                           into figures/, regenerate the package, outputs, figures,
                           the student exercises, their graded example submissions
                           and the reader notebooks from the sources, then render
                           with Quarto (from PATH, or pip-installed into .venv when
                           it can be) to HTML and EPUB, and print the PDF with
                           Chromium
    python3 dev.py test    set up .venv, then run ruff, mypy and every test that
                           needs no rendered book: the quick suite, under 90 s on
                           two cores
    python3 dev.py test --full
                           the same, then render the book with Quarto into a
                           temporary folder and read it in Chromium too: the HTML
                           pages, live cells, EPUB and PDF (needs Quarto, Chromium
                           and npm; AGENTBOOK_FULL=1 asks for the same)

Set-up creates a virtual environment in .venv and installs the pinned
requirements (requirements-dev.txt, which includes requirements.txt) and the
agentbook package into it. Both commands share it, and set-up is skipped when
the requirement files have not changed since the last time.

It installs with uv, a pinned release that it first pip-installs into
.cache/ when it is not on PATH, and falls back to pip, saying so, where uv
cannot be installed or fails. AGENTBOOK_INSTALLER=pip makes it use pip alone.
"""

from __future__ import annotations

import hashlib
import importlib.util
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
# Set-up installs with uv, which is several times faster than pip. This exact release is
# pip-installed into UV_HOME (beside .venv, git ignores it) unless it is on PATH already.
UV_VERSION = "0.13.9"
UV_HOME = ROOT / ".cache" / f"uv-{UV_VERSION}"
# AGENTBOOK_INSTALLER=pip makes set-up use pip alone, as it does where uv cannot run.
INSTALLER_VARIABLE = "AGENTBOOK_INSTALLER"
# The Quarto that `book` installs into .venv when none is on PATH. The quarto-cli package
# downloads Quarto's binary from GitHub while it installs, so it fails where that is blocked.
QUARTO_CLI = "quarto-cli==1.10.19"
# `test --full`, or this variable set to 1, runs the tests that render the book and read it
# in Chromium (tests/conftest.py); without it they skip, and the suite stays quick.
FULL_VARIABLE = "AGENTBOOK_FULL"
# Where the tests look for Chromium, as scripts/checks/measure_pages.py does: $CHROMIUM, then
# these names on PATH.
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
# The AgentDojo suites whose results `book` writes into figures/ for Chapter 3.
INJECTION_SUITES = ("banking", "slack")
QUARTO_INSTALL_TIMEOUT = 600  # seconds; the binary is large, but a blocked download must end
# The package's own `quarto` script drops the exit status; find the binary it wraps instead.
FIND_QUARTO = "import pathlib, quarto_cli; print(pathlib.Path(quarto_cli.__file__).parent / 'bin')"
QUARTO_HELP = (
    "Missing: Quarto, so the book was not rendered to _book/.\n"
    f"`quarto` is not on PATH, and `pip install {QUARTO_CLI}` into .venv failed (that package\n"
    "downloads the Quarto binary from GitHub while it installs).\n"
    "Everything else is regenerated: agentbook/, the stored outputs, figures/, exercises/,\n"
    "tests/fixtures/submissions/ and notebooks/.\n"
    "To render, install the Quarto command-line tool (https://quarto.org/docs/get-started/)\n"
    "so that `quarto` is on PATH, then run `python3 dev.py book` again."
)


# The suite's plugins are named rather than found: a plugin found by autoloading has its
# whole distribution (all of hypothesis, all of anyio) assertion-rewritten on import, a
# second of work in every process wherever bytecode is not cached.
PYTEST_PLUGINS = ("--disable-plugin-autoload", "-p", "xdist", "-p", "nbval",
                  "-p", "hypothesispytest", "-p", "pytest_timeout")
# No test, its fixtures included (the full suite's render among them, about a minute), takes
# near 900 s; one that does is stuck, and fails with the traceback of where it waits. Past
# 3,000 s (the full suite takes about 8 minutes) no further test starts: a run that goes
# wrong ends within the hour, with its failures, instead of holding CI until CI gives up.
PER_TEST_LIMIT = ("--timeout", "900", "--session-timeout", "3000")
# One pytest worker per core. A file's tests, and so each notebook's kernel, stay on one
# worker, but each test class goes where it fits; conftest.py hands out the slowest
# files first and spreads the grading tests one by one.
PYTEST_SPREAD = (*PYTEST_PLUGINS, *PER_TEST_LIMIT, "-n", "auto", "--dist", "loadscope",
                 "--no-loadscope-reorder")


def venv_python() -> Path:
    scripts = "Scripts" if os.name == "nt" else "bin"
    return VENV / scripts / ("python.exe" if os.name == "nt" else "python")


def run(*command: str | Path, environment: dict[str, str] | None = None) -> int:
    """Run a command from the repository root and return its exit status."""
    print("+", " ".join(str(part) for part in command), flush=True)
    return subprocess.call([str(part) for part in command], cwd=ROOT, env=environment)


def setup_fingerprint() -> str:
    """A hash of everything that decides what set-up installs."""
    digest = hashlib.sha256()
    for name in ("requirements.txt", "requirements-dev.txt", "pyproject.toml"):
        digest.update((ROOT / name).read_bytes())
    return digest.hexdigest()


def parse_pip_config(listing: str) -> dict[str, str]:
    """pip's settings from what `pip config list` prints, a PIP_* variable winning over files.

    Lines look like `global.index-url='...'` (from a configuration file) or
    `:env:.cert='...'` (from the PIP_CERT variable).
    """
    from_files: dict[str, str] = {}
    from_environment: dict[str, str] = {}
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        section, _, name = key.rpartition(".")
        settings = from_environment if section == ":env:" else from_files
        settings[name] = value.strip().strip("'\"")
    return from_files | from_environment


def uv_environment(pip_settings: dict[str, str], environment: dict[str, str]) -> dict[str, str]:
    """The environment for uv: the package index and certificates that pip is set to use.

    Only these two carry over, and only where no uv or SSL variable says otherwise. pip's
    extra indexes and find-links are left out on purpose: uv takes a package from the first
    index that has it, so an extra index holding older releases would hide a pinned one.
    """
    environment = dict(environment)
    if "index-url" in pip_settings and not {"UV_INDEX_URL", "UV_DEFAULT_INDEX"} & set(environment):
        environment["UV_DEFAULT_INDEX"] = pip_settings["index-url"]
    if "cert" in pip_settings and "SSL_CERT_FILE" not in environment:
        environment["SSL_CERT_FILE"] = pip_settings["cert"]
    return environment


def ensure_venv_pip() -> None:
    """Give .venv its pip; it is created without one, since uv does not need it."""
    if subprocess.run([venv_python(), "-m", "pip", "--version"], capture_output=True).returncode:
        run(venv_python(), "-m", "ensurepip", "--default-pip")


def bootstrap_python() -> Path:
    """An interpreter with pip, to install uv with: this one, else .venv's."""
    if importlib.util.find_spec("pip") is not None:
        return Path(sys.executable)
    ensure_venv_pip()
    return venv_python()


def uv_binary(folder: Path) -> Path | None:
    """The uv executable in a folder pip installed it into, if it is there and runs."""
    for scripts in ("bin", "Scripts"):
        for name in ("uv", "uv.exe"):
            binary = folder / scripts / name
            if binary.is_file() and subprocess.run(
                    [binary, "--version"], capture_output=True).returncode == 0:
                return binary
    return None


def find_uv(pip_python: Path) -> Path | None:
    """The pinned uv: on PATH, in the bootstrap folder, or installed there now."""
    on_path = shutil.which("uv")
    if on_path:
        version = subprocess.run([on_path, "--version"], capture_output=True, text=True)
        if version.returncode == 0 and version.stdout.split()[1:2] == [UV_VERSION]:
            return Path(on_path)
    found = uv_binary(UV_HOME)
    if found is not None:
        return found
    shutil.rmtree(UV_HOME, ignore_errors=True)  # a half-finished earlier attempt
    # --only-binary: where no wheel fits this platform, give up at once rather than compile uv.
    status = run(pip_python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
                 "--only-binary", ":all:", "--target", UV_HOME, f"uv=={UV_VERSION}")
    return uv_binary(UV_HOME) if status == 0 else None


def pip_pin() -> str:
    """The pip that `python -m venv` would have put in .venv, so .venv has the same pip."""
    try:
        import ensurepip
    except ImportError:  # some Linux distributions ship Python without it
        return "pip"
    return f"pip=={ensurepip.version()}"


def install_with_uv() -> bool:
    """Install the requirements, the package and pip into .venv with uv; False if uv can't."""
    if os.environ.get(INSTALLER_VARIABLE) == "pip":
        return False
    pip_python = bootstrap_python()
    uv = find_uv(pip_python)
    if uv is None:
        print(f"uv {UV_VERSION} could not be installed or does not run here;"
              " installing with pip instead (slower).", file=sys.stderr, flush=True)
        return False
    listing = subprocess.run([pip_python, "-m", "pip", "config", "list"],
                             capture_output=True, text=True).stdout
    environment = uv_environment(parse_pip_config(listing), dict(os.environ))
    # --compile-bytecode: pip compiles what it installs and uv does not by default. Without it
    # every process compiles each module it imports, every time where PYTHONDONTWRITEBYTECODE
    # is set: that nearly doubled the test suite's processor time.
    status = run(uv, "pip", "install", "--quiet", "--compile-bytecode", "--python",
                 venv_python(), pip_pin(), "-r", REQUIREMENTS, "-e", ".", environment=environment)
    if status != 0:
        print(f"uv failed (exit status {status}); installing with pip instead (slower).",
              file=sys.stderr, flush=True)
        return False
    return True


def install_with_pip() -> int:
    ensure_venv_pip()
    return run(venv_python(), "-m", "pip", "install", "--disable-pip-version-check",
               "--quiet", "-r", REQUIREMENTS, "-e", ".")


def set_up() -> None:
    """Create .venv if needed and install the pinned requirements and the package."""
    if not venv_python().exists():
        print(f"creating {VENV.relative_to(ROOT)}", flush=True)
        venv.EnvBuilder(with_pip=False).create(VENV)
    fingerprint = setup_fingerprint()
    if SETUP_STAMP.exists() and SETUP_STAMP.read_text() == fingerprint:
        return
    if not install_with_uv():
        status = install_with_pip()
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
    # Chapter 3 reads its AgentDojo results from figures/, and Chapter 4 what an MCP call
    # costs and its frameworks' import times, so they are written first.
    steps = (*(("scripts.checks.injection", "--suite", suite, "--json",
                f"figures/agentdojo-{suite}.json") for suite in INJECTION_SUITES),
             ("scripts.checks.bench", "mcp", "--json", "figures/mcp-cost.json"),
             ("scripts.checks.bench", "frameworks", "--json", "figures/frameworks-bench.json"),
             ("scripts.build.regenerate",), ("scripts.course.exercises",),
             ("scripts.course.grading", "fixtures"), ("scripts.build.readers",))
    for step in steps:
        status = run(venv_python(), "-m", *step)
        if status != 0:
            return status
    quarto = shutil.which("quarto") or venv_quarto() or install_quarto()
    if quarto is None:
        print(QUARTO_HELP, file=sys.stderr)
        return 3
    # The EPUB's diagrams are drawn to PNG by a browser: Quarto is told which one.
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium")
    environment = dict(os.environ, QUARTO_CHROMIUM_HEADLESS_MODE="new")
    if chromium:
        environment.setdefault("QUARTO_CHROMIUM", chromium)
    status = run(quarto, "render", environment=environment)
    if status != 0:
        return status
    return run(venv_python(), "-m", "scripts.build.print_book")


def full_suite_lacks(quarto: str | None) -> list[str]:
    """What the full suite needs that this machine lacks, each with where it comes from."""
    lacks = []
    if quarto is None:
        lacks.append("Quarto: `quarto` on PATH (README.md, \"Rendering the book\")")
    if not (os.environ.get("CHROMIUM") or any(map(shutil.which, CHROMIUM_NAMES))):
        lacks.append("Chromium: on PATH, or named by $CHROMIUM (Debian: apt install chromium)")
    if shutil.which("npm") is None:
        lacks.append("npm, which installs Pyodide and axe-core into live/ (apt install npm)")
    return lacks


def test(full: bool = False) -> int:
    """Lint, type-check and run every test; fail if any of them fails. The quick suite skips
    the tests that need the rendered book; `full` renders it and runs them too."""
    set_up()
    python = venv_python()
    environment = dict(os.environ)
    if full or environment.get(FULL_VARIABLE) == "1":
        quarto = shutil.which("quarto") or venv_quarto()
        lacks = full_suite_lacks(quarto)
        if quarto is None or lacks:
            print("The full suite needs what is missing here:", *lacks, sep="\n  ",
                  file=sys.stderr)
            return 2
        environment[FULL_VARIABLE] = "1"
        environment["PATH"] = os.pathsep.join([str(Path(quarto).parent),
                                               environment.get("PATH", os.defpath)])
    checks = {
        "ruff": (python, "-m", "ruff", "check", "."),
        "mypy": (python, "-m", "mypy"),
        "pytest": (python, "-m", "pytest", *PYTEST_SPREAD),
    }
    failed = [name for name, command in checks.items()
              if run(*command, environment=environment) != 0]
    if failed:
        print("failed:", ", ".join(failed), file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 11):  # noqa: UP036 - dev.py runs on whatever python3 is
        print("agentbook needs Python 3.11 or newer.", file=sys.stderr)
        return 2
    commands = {"book": book, "test": test}
    if argv == ["test", "--full"]:
        return test(full=True)
    if len(argv) != 1 or argv[0] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    return commands[argv[0]]()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
