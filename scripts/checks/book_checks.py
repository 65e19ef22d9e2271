"""Checks of the book's sources that need no Quarto: run `python -m scripts.checks.book_checks`.

Each `check_*` function takes the book's root folder and returns the problems it found, one
sentence each, naming the file; an empty list means the check passes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from itertools import takewhile
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

import pypandoc
import yaml

CONFIG = "_quarto.yml"
CROSSREF_KINDS = ("fig", "tbl", "eq", "sec", "lst")
CROSSREF_PREFIXES = tuple(f"{kind}-" for kind in CROSSREF_KINDS)  # @sec-tools, not @yao2023
NOTEBOOK_DIRS = ("chapters", "exercises", "notebooks")  # where a notebook may import agentbook
BADGE_FILES = ("README.md", "index.qmd")  # where readers find the Binder and Colab links
LAUNCH_SERVICES = ("mybinder.org", "colab.research.google.com")
LAUNCH_URL = re.compile(r"https://(?:mybinder\.org/v2/gh|colab\.research\.google\.com/github)"
                        r"/[^\s)\"'<>\]]+")

# Pandoc's citation key: a letter, digit or underscore, then more of them, with single
# punctuation marks allowed inside (so the colon in "see @sec-budgets:" is not part of the key).
_KEY = r"[A-Za-z0-9_](?:[A-Za-z0-9_]|[:.#$%&\-+?<>~/](?=[A-Za-z0-9_]))*"
# An @ right after a word character, a dot, a slash or a colon belongs to an e-mail address or
# a URL, not to a citation.
CITATION = re.compile(r"(?<![\w@.:/])@(" + _KEY + ")")
# A label is an attribute in braces: {#sec-tools}, {#eq-step}, {#tbl-canon .striped}.
ATTRIBUTE_LABEL = re.compile(r"\{[^{}\n]*?#((?:" + "|".join(CROSSREF_KINDS) + r")-[^\s{}]+)")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*(.*?)\s*$")
CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)
HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
MERMAID_DIV = re.compile(r"""<div\b[^>]*\bclass\s*=\s*["'][^"']*\bmermaid\b""", re.IGNORECASE)
IMPORTS_AGENTBOOK = re.compile(r"^\s*(?:from\s+agentbook[\s.]|import\s+agentbook\b)", re.MULTILINE)
CONDA_PIN = re.compile(r"^([A-Za-z0-9_.\-]+)\s*(?:==?|\s)\s*([^\s=<>!,*]+)$")
PIP_PIN = re.compile(r"^([A-Za-z0-9_.\-]+)\s*==\s*([^\s;#]+)")

# The first code cell of a notebook that imports the package: on Colab it installs the package
# from the commit the book pins (see release_commit); elsewhere it prints nothing, as nbval
# expects. The autograder installs from the same commit.
INSTALL_CELL = """\
# On Colab the book's package is not installed yet: install it as it was
# when this notebook was made. Everywhere else this cell does nothing.
import importlib.util
import subprocess
import sys

REPOSITORY = "git+{repo_url}"
COMMIT = "{ref}"
if importlib.util.find_spec("agentbook") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                    f"agentbook @ {{REPOSITORY}}@{{COMMIT}}"], check=True)"""


def load_config(root: Path) -> dict[str, Any]:
    """The parsed `_quarto.yml`, or an empty mapping when there is none."""
    path = root / CONFIG
    loaded = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return loaded if isinstance(loaded, dict) else {}


def listed_files(config: dict[str, Any]) -> list[str]:
    """Every file the book lists, in reading order: chapters (parts flattened), appendices."""
    book = config.get("book") or {}

    def flatten(entries: list[Any]) -> Iterator[str]:
        for entry in entries or []:
            if isinstance(entry, str):
                yield entry
            elif isinstance(entry, dict):
                part = entry.get("part")
                if isinstance(part, str) and part.endswith((".qmd", ".md", ".ipynb")):
                    yield part
                yield from flatten(entry.get("chapters") or [])

    return [*flatten(book.get("chapters") or []), *flatten(book.get("appendices") or [])]


def repository(config: dict[str, Any]) -> tuple[str, str]:
    """The book's GitHub repository as ("owner/name", branch), from `book: repo-url`."""
    book = config.get("book") or {}
    url = str(book.get("repo-url") or "").rstrip("/").removesuffix(".git")
    match = re.fullmatch(r"https://github\.com/([^/\s]+/[^/\s]+)", url)
    return (match.group(1) if match else ""), str(book.get("repo-branch") or "main")


def release_commit(root: Path) -> str:
    """What the install cells and the autograder install: pyproject's [tool.agentbook] release."""
    path = root / "pyproject.toml"
    config = tomllib.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return str(config.get("tool", {}).get("agentbook", {}).get("release", ""))


def check_release(root: Path) -> list[str]:
    """The pinned commit is one of this repository's and holds the package as it is now, so
    a notebook installs the code it was made with. Outside a git clone only its form is checked."""
    commit = release_commit(root)
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        return ["pyproject.toml: [tool.agentbook] release must be the full hash of a commit"]
    if not (root / ".git").exists():
        return []
    git = ("git", "-C", str(root))
    if subprocess.run([*git, "cat-file", "-e", f"{commit}^{{commit}}"],
                      capture_output=True).returncode:
        return [f"pyproject.toml: release {commit[:12]} is not a commit of this repository"]
    if subprocess.run([*git, "diff", "--quiet", commit, "--", "agentbook"]).returncode:
        return [f"agentbook/ has changed since the pinned release {commit[:12]}: commit it, "
                "pin that commit in pyproject.toml and run `python3 dev.py book`"]
    return []


def cell_source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def read_cells(path: Path) -> list[dict[str, Any]]:
    """A notebook's cells (read as plain JSON: much faster than validating with nbformat)."""
    cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    return [cell for cell in cells if isinstance(cell, dict)]


def book_cells(root: Path, kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every cell of a kind ("markdown", "code") of every listed file that exists, with where
    it came from; a .qmd or .md file is one markdown cell."""
    for name in listed_files(load_config(root)):
        path = root / name
        if path.suffix == ".ipynb" and path.is_file():
            for number, cell in enumerate(read_cells(path), start=1):
                if cell.get("cell_type") == kind:
                    yield f"{name}, cell {cell.get('id', number)}", cell
        elif path.is_file() and kind == "markdown":
            yield name, {"source": path.read_text(encoding="utf-8")}


def book_markdown(root: Path) -> Iterator[tuple[str, str]]:
    """Every listed file's markdown (a .qmd/.md file whole, each markdown cell), and where."""
    return ((where, cell_source(cell)) for where, cell in book_cells(root, "markdown"))


class Fence(NamedTuple):
    """A fenced block in markdown: its info string (```{mermaid} gives "{mermaid}") and body."""
    info: str
    lines: list[str]


def split_fences(text: str) -> tuple[str, list[Fence]]:
    """Separate markdown into the prose outside fenced blocks and the blocks themselves."""
    prose: list[str] = []
    fences: list[Fence] = []
    opening: tuple[str, str] | None = None  # the fence characters and the info string
    body: list[str] = []
    for line in text.splitlines():
        match = FENCE.match(line)
        if opening is None and match:
            opening, body = (match[1], match[2]), []
        elif opening is None:
            prose.append(line)
        # A fence closes with at least as many of the same character, and no info string.
        elif match and not match[2] and match[1].startswith(opening[0][0] * len(opening[0])):
            fences.append(Fence(opening[1], body))
            opening = None
        else:
            body.append(line)
    if opening is not None:  # an unclosed fence runs to the end, as in CommonMark
        fences.append(Fence(opening[1], body))
    return "\n".join(prose), fences


def prose_of(text: str) -> str:
    """Markdown without code blocks, code spans and comments: where references can live."""
    return CODE_SPAN.sub(" ", HTML_COMMENT.sub(" ", split_fences(text)[0]))


def cell_options(lines: list[str], prefix: str) -> dict[str, Any]:
    """Quarto cell options: the leading `#| key: value` (or `%%| ...`) lines, as YAML."""
    leading = takewhile(lambda line: line.startswith(prefix), lines)
    try:
        options = yaml.safe_load(textwrap.dedent("\n".join(line[len(prefix):] for line in leading)))
    except yaml.YAMLError:
        return {}
    return options if isinstance(options, dict) else {}


def is_mermaid(fence: Fence) -> bool:
    return fence.info == "{mermaid}"


def references(text: str) -> Iterator[str]:
    """Every `@key` in the prose of `text`, cross-references and citations alike."""
    return (match[1] for match in CITATION.finditer(prose_of(text)))


def book_references(root: Path, crossrefs: bool) -> Iterator[tuple[str, str]]:
    """Every cross-reference, or else every citation, in the book's prose, with where it is."""
    for where, text in book_markdown(root):
        for key in references(text):
            if key.startswith(CROSSREF_PREFIXES) == crossrefs:
                yield where, key


def check_listed_files(root: Path) -> list[str]:
    """`_quarto.yml` exists, every file it lists exists, and it lists every chapter notebook."""
    config = load_config(root)
    if not config:
        return [f"{CONFIG} is missing or empty"]
    listed = listed_files(config)
    problems = [] if listed else [f"{CONFIG} lists no chapters under book: chapters"]
    bibliography = config.get("bibliography") or []
    filters = config.get("filters") or []
    others = [bibliography] if isinstance(bibliography, str) else list(bibliography)
    others += [entry for entry in filters if isinstance(entry, str) and entry.endswith(".lua")]
    for name in [*listed, *others]:
        if not (root / name).is_file():
            problems.append(f"{CONFIG} lists {name}, which does not exist")
    for notebook in sorted((root / "chapters").glob("*.ipynb")):
        name = notebook.relative_to(root).as_posix()
        if name not in listed:
            problems.append(f"{name} is a chapter notebook that {CONFIG} does not list")
    return problems


def block_options(root: Path) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """The options of every code cell, then of every {mermaid} diagram, with where it is and
    whether it is a figure: a diagram, or a cell with an image among its outputs."""
    for where, cell in book_cells(root, "code"):
        image = any(key.startswith("image/") for output in cell.get("outputs") or []
                    for key in (output.get("data") or {}))
        yield where, cell_options(cell_source(cell).splitlines(), "#|"), image
    for where, text in book_markdown(root):
        for fence in split_fences(text)[1]:
            if is_mermaid(fence):
                yield where, cell_options(fence.lines, "%%|"), True


def labels(root: Path) -> dict[str, list[str]]:
    """Every label in the book and where each is defined (more than once is a problem)."""
    found: dict[str, list[str]] = {}
    for where, text in book_markdown(root):
        for name in ATTRIBUTE_LABEL.findall(CODE_SPAN.sub(" ", split_fences(text)[0])):
            found.setdefault(name, []).append(where)
    for where, options, _ in block_options(root):
        if options.get("label"):
            found.setdefault(str(options["label"]), []).append(where)
    return found


def check_crossrefs(root: Path) -> list[str]:
    """Every `@fig-`/`@tbl-`/`@eq-`/`@sec-` reference resolves to exactly one label, and the
    prose refers to every figure and every equation."""
    defined = labels(root)
    problems = [f"label {name} is defined more than once: {'; '.join(places)}"
                for name, places in sorted(defined.items()) if len(places) > 1]
    found = list(book_references(root, crossrefs=True))
    problems += [f"{where}: @{key} refers to a label the book does not have"
                 for where, key in found if key not in defined]
    referenced = {key for _, key in found}
    problems += [f"{places[0]}: {name} is never referred to as @{name}"
                 for name, places in sorted(defined.items())
                 if name.startswith(("fig-", "eq-")) and name not in referenced]
    return problems


def bibliography(root: Path) -> str:
    """The bibliography file `_quarto.yml` names."""
    name = load_config(root).get("bibliography") or "references.bib"
    return name if isinstance(name, str) else name[0]


def check_citations(root: Path) -> list[str]:
    """Every citation has an entry, and every entry is cited (the references page lists only
    the works the book cites)."""
    bib_name = bibliography(root)
    path = root / bib_name  # pandoc reads it, as Quarto's citeproc will
    entries = json.loads(pypandoc.convert_file(path, "csljson", format="bibtex")
                         if path.is_file() else "[]")
    keys = {entry["id"] for entry in entries}
    found = list(book_references(root, crossrefs=False))
    problems = [f"{where}: @{key} is cited but {bib_name} has no entry"
                for where, key in found if key not in keys]
    problems += [f"{bib_name}: {key} is never cited, so the references page omits it"
                 for key in sorted(keys - {key for _, key in found})]
    return problems


def check_diagrams(root: Path) -> list[str]:
    """Every diagram is a ```{mermaid} block: no bare ```mermaid fence, no mermaid <div>."""
    problems = []
    for where, text in book_markdown(root):
        prose, fences = split_fences(text)
        problems += [f"{where}: a diagram fenced as ```{fence.info} must be ```{{mermaid}}"
                     for fence in fences if "mermaid" in fence.info and not is_mermaid(fence)]
        if MERMAID_DIV.search(CODE_SPAN.sub(" ", prose)):
            problems.append(f'{where}: a <div class="mermaid"> must be a '
                            "```{mermaid} block")
    return problems


def check_figures(root: Path) -> list[str]:
    """Every figure (see block_options) has a `fig-` label and a `fig-cap`; a `tbl-` a `tbl-cap`;
    a cell that draws an image has a `fig-alt`."""
    problems = []
    for where, options, figure in block_options(root):
        label = str(options.get("label") or "")
        if figure and not label.startswith("fig-"):
            problems.append(f"{where}: a figure needs a #| label: fig-... option")
        if label.startswith("fig-") and not options.get("fig-cap"):
            problems.append(f"{where}: figure {label} needs a fig-cap")
        if label.startswith("tbl-") and not options.get("tbl-cap"):
            problems.append(f"{where}: table {label} needs a tbl-cap")
    # A plot is an image to a screen reader and in the EPUB: its `fig-alt`, written in the
    # chapter beside the code that draws it, says what the caption leaves to the eye.
    for where, cell in book_cells(root, "code"):
        image = any(key.startswith("image/") for output in cell.get("outputs") or []
                    for key in (output.get("data") or {}))
        if image and not cell_options(cell_source(cell).splitlines(), "#|").get("fig-alt"):
            problems.append(f"{where}: a cell that draws an image needs a #| fig-alt")
    return problems


def normalize(name: str) -> str:
    """A package name in the normal form of PEP 503, which conda-forge also uses for these."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pip_pins(path: Path) -> dict[str, str]:
    """`name==version` lines of a requirements file, following `-r other.txt` includes."""
    pins: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith(("-r ", "--requirement ")):
            pins.update(pip_pins(path.parent / line.split(maxsplit=1)[1]))
        elif match := PIP_PIN.match(line):
            pins[normalize(match.group(1))] = match.group(2)
    return pins


# What Binder takes from conda-forge: the interpreter, its installer and the notebook server.
# Everything else comes from requirements.txt through pip, so that there is one list of pins.
CONDA_ONLY = ("python", "pip", "jupyterlab")
BINDER_PIP = ("-r requirements.txt", "-e .")


def check_environment(root: Path) -> list[str]:
    """environment.yml (Binder) takes only Python, pip and JupyterLab from conda-forge, pinned,
    and installs everything else with pip from requirements.txt, plus the book's package;
    any further pip line must be pinned exactly as requirements-dev.txt pins it."""
    path = root / "environment.yml"
    if not path.is_file():
        return ["environment.yml is missing"]
    environment = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    problems = []
    if "conda-forge" not in (environment.get("channels") or []):
        problems.append("environment.yml: channels must include conda-forge")
    dependencies = environment.get("dependencies") or []
    conda = [str(entry).strip() for entry in dependencies if not isinstance(entry, dict)]
    pip = [str(line).strip() for entry in dependencies if isinstance(entry, dict)
           for line in entry.get("pip") or []]
    pinned: dict[str, str] = {}
    for line in conda:
        match = CONDA_PIN.match(line)
        name = normalize(match[1]) if match else line
        if name not in CONDA_ONLY:
            problems.append(f"environment.yml: {line!r} comes from conda-forge; only "
                            f"{', '.join(CONDA_ONLY)} may: install it with pip from "
                            "requirements.txt")
        elif match:
            pinned[name] = match[2]
        else:
            problems.append(f"environment.yml: {line!r} is not pinned to one version")
    if not re.fullmatch(r"3\.\d+\.\d+", pinned.get("python", "")):
        problems.append("environment.yml: python must be pinned to a full version, e.g. 3.11.7")
    problems += [f"environment.yml: the pip section must hold '{line}'" for line in BINDER_PIP
                 if line not in pip]
    runtime = pip_pins(root / "requirements.txt") if (root / "requirements.txt").is_file() else {}
    development = (pip_pins(root / "requirements-dev.txt")
                   if (root / "requirements-dev.txt").is_file() else {})
    for line in pip:
        if line in BINDER_PIP:
            continue
        match = PIP_PIN.match(line)
        name = normalize(match[1]) if match else line
        if name in runtime:
            problems.append(f"environment.yml: {line!r} is in requirements.txt already")
        elif not match or development.get(name) != match[2]:
            wanted = development.get(name)
            problems.append(f"environment.yml: pip requirement {line!r} must be pinned as "
                            "requirements-dev.txt pins it"
                            + (f" ({name}=={wanted})" if wanted else ", which it does not"))
    return problems


def launch_urls(text: str) -> list[str]:
    return LAUNCH_URL.findall(text)


def launch_target(url: str) -> tuple[str, str, str]:
    """The (owner/name, branch, path) a Binder or Colab URL opens; path "" for none."""
    parts = urlsplit(url)
    pieces = parts.path.strip("/").split("/")
    if parts.netloc == "mybinder.org":  # /v2/gh/OWNER/NAME/BRANCH?labpath=PATH
        labpath = parse_qs(parts.query).get("labpath", [""])[0]  # decoded by parse_qs
        return "/".join(pieces[2:4]), "/".join(pieces[4:]), labpath
    # colab: /github/OWNER/NAME/blob/BRANCH/PATH
    return "/".join(pieces[1:3]), "/".join(pieces[4:5]), "/".join(pieces[5:])


def check_launch_links(root: Path) -> list[str]:
    """README.md and the preface carry Binder and Colab links to the repository that
    `_quarto.yml` names (`book: repo-url`, `repo-branch`), opening files that exist."""
    slug, branch = repository(load_config(root))
    if not slug:
        return [f"{CONFIG}: book: repo-url must be a https://github.com/OWNER/NAME address"]
    problems = []
    for name in BADGE_FILES:
        path = root / name
        if not path.is_file():
            problems.append(f"{name} is missing")
            continue
        urls = launch_urls(path.read_text(encoding="utf-8"))
        problems += [f"{name} has no {service} link" for service in LAUNCH_SERVICES
                     if not any(urlsplit(url).netloc == service for url in urls)]
        for url in urls:
            target_slug, target_branch, target = launch_target(url)
            if (target_slug, target_branch) != (slug, branch):
                problems.append(f"{name}: {url} opens {target_slug}@{target_branch}, "
                                f"not {slug}@{branch} from {CONFIG}")
            if target and not (root / target).exists():
                problems.append(f"{name}: {url} opens {target}, which does not exist")
    return problems


def check_install_cells(root: Path) -> list[str]:
    """A notebook under chapters/ or exercises/ that imports agentbook first runs the install
    cell, unchanged and with no stored output."""
    slug, _ = repository(load_config(root))
    commit = release_commit(root)
    if not commit:
        return ["pyproject.toml: [tool.agentbook] has no release, so the install cells have "
                "no commit to pin"]
    expected = INSTALL_CELL.format(repo_url=f"https://github.com/{slug}", ref=commit)
    problems = []
    for path in sorted(path for folder in NOTEBOOK_DIRS for path in (root / folder).rglob("*.ipynb")
                       if ".ipynb_checkpoints" not in path.parts):
        name = path.relative_to(root).as_posix()
        code = [cell for cell in read_cells(path) if cell.get("cell_type") == "code"]
        first_import = next((number for number, cell in enumerate(code)
                             if IMPORTS_AGENTBOOK.search(cell_source(cell))), None)
        if first_import is None:
            continue
        installs = [cell for cell in code[:first_import]
                    if 'find_spec("agentbook")' in cell_source(cell)]
        if not installs:
            problems.append(f"{name}: code cell {first_import + 1} imports agentbook, but no "
                            "install cell comes before it")
            continue
        if cell_source(installs[0]).strip() != expected:
            problems.append(f"{name}: the install cell differs from the book's, which "
                            f"installs the release {commit[:12]} (see INSTALL_CELL in "
                            "scripts/checks/book_checks.py)")
        if installs[0].get("outputs"):
            problems.append(f"{name}: the install cell has stored outputs; where the package "
                            "is installed it must print nothing")
    return problems


CHECKS = (check_listed_files, check_crossrefs, check_citations, check_diagrams, check_figures,
          check_environment, check_launch_links, check_release, check_install_cells)


def main(argv: list[str] | None = None) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[2]
    problems = [problem for check in CHECKS for problem in check(root)]
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
