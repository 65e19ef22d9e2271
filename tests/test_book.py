"""The book's structure, checked without Quarto (scripts/checks/book_checks.py holds the checks).

Each test runs one check twice: on the real book, where it must find nothing, and on a small
book in tmp_path that is first whole (nothing found either) and then broken on purpose, where
the check must name the specific problem. A check that passes everything would fail here.
"""

import contextlib
import io
import subprocess
import json
import zlib
from pathlib import Path

import pytest

from scripts.checks import book_checks
from scripts.checks.book_checks import (
    check_citations,
    check_crossrefs,
    check_diagrams,
    check_environment,
    check_figures,
    check_install_cells,
    check_launch_links,
    check_listed_files,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
REPO = "https://github.com/example/tiny"
PINNED = "0123456789abcdef0123456789abcdef01234567"  # a commit hash of the right form

CONFIG = f"""\
project:
  type: book
book:
  title: tiny
  repo-url: {REPO}
  repo-branch: main
  chapters:
    - index.qmd
    - chapters/01_one.ipynb
    - references.qmd
bibliography: references.bib
"""

BINDER = "https://mybinder.org/v2/gh/example/tiny/main?labpath=chapters%2F01_one.ipynb"
COLAB = "https://colab.research.google.com/github/example/tiny/blob/main/chapters/01_one.ipynb"

INDEX = f"""\
# Preface {{.unnumbered}}

[![Binder](https://mybinder.org/badge_logo.svg)]({BINDER})
[![Colab](https://colab.research.google.com/assets/colab-badge.svg)]({COLAB})

We follow @yao2023react; mail me@example.com. Cells marked `# @save` and `@decorators`
in code are not citations:

```python
@save
def f(): ...
```
"""

CHAPTER_PROSE = """\
# One {#sec-one}

See @fig-loop, @fig-bars and @tbl-costs; the step is @eq-step, in @sec-one.

$$
x = 1
$$ {#eq-step}

```{mermaid}
%%| label: fig-loop
%%| fig-cap: "The loop."
flowchart LR
  A --> B
```
"""

BIB = """\
@inproceedings{yao2023react,
  title = {ReAct},
  year  = {2023},
}
"""

ENVIRONMENT = """\
channels: [conda-forge]
dependencies:
  - python=3.11.7
  - pip=24.0
  - pip:
      - -r requirements.txt
      - -e .
      - pytest==9.2.0
"""


def code_cell(source: str, outputs: list[dict[str, object]] | None = None) -> dict[str, object]:
    return {"cell_type": "code", "execution_count": None, "id": f"c{zlib.crc32(source.encode())}",
            "metadata": {}, "outputs": outputs or [], "source": source}


def markdown_cell(source: str) -> dict[str, object]:
    return {"cell_type": "markdown", "id": f"m{zlib.crc32(source.encode())}", "metadata": {},
            "source": source}


SVG_OUTPUT = {"output_type": "display_data", "metadata": {},
              "data": {"image/svg+xml": "<svg/>", "text/plain": "<SVG>"}}
TABLE_OUTPUT = {"output_type": "execute_result", "execution_count": 1, "metadata": {},
                "data": {"text/plain": "table"}}


def write_notebook(path: Path, cells: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    notebook = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(notebook), encoding="utf-8")


def chapter_cells() -> list[dict[str, object]]:
    return [
        markdown_cell(CHAPTER_PROSE),
        code_cell('#| label: fig-bars\n#| fig-cap: "Bars."\n#| fig-alt: "Two bars."\n'
                  'show()', [SVG_OUTPUT]),
        code_cell('#| label: tbl-costs\n#| tbl-cap: "Costs."\ntable', [TABLE_OUTPUT]),
    ]


@pytest.fixture
def book(tmp_path: Path) -> Path:
    """A whole, tiny book: every check finds nothing in it."""
    (tmp_path / "_quarto.yml").write_text(CONFIG, encoding="utf-8")
    (tmp_path / "index.qmd").write_text(INDEX, encoding="utf-8")
    (tmp_path / "references.qmd").write_text("# References\n\n::: {#refs}\n:::\n")
    (tmp_path / "references.bib").write_text(BIB, encoding="utf-8")
    (tmp_path / "README.md").write_text(INDEX, encoding="utf-8")
    (tmp_path / "requirements.txt").write_text("numpy==2.4.6\n")
    (tmp_path / "requirements-dev.txt").write_text("-r requirements.txt\npytest==9.2.0\n")
    (tmp_path / "environment.yml").write_text(ENVIRONMENT, encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(
        f'[project]\nname = "tiny"\n\n[tool.agentbook]\nrelease = "{PINNED}"\n')
    write_notebook(tmp_path / "chapters" / "01_one.ipynb", chapter_cells())
    for check in book_checks.CHECKS:
        assert check(tmp_path) == [], check.__name__
    return tmp_path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"the fixture no longer contains {old!r}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_quarto_yml_lists_every_chapter_and_every_listed_file_exists(book: Path) -> None:
    write_notebook(book / "chapters" / "02_two.ipynb", [markdown_cell("# Two")])
    edit(book / "_quarto.yml", "    - references.qmd", "    - references.qmd\n    - gone.qmd")
    assert check_listed_files(book) == [
        "_quarto.yml lists gone.qmd, which does not exist",
        "chapters/02_two.ipynb is a chapter notebook that _quarto.yml does not list",
    ]
    assert check_listed_files(REPO_ROOT) == []

def test_every_cross_reference_resolves_to_a_label(book: Path) -> None:
    edit(book / "chapters" / "01_one.ipynb", "in @sec-one", "in @sec-two")
    edit(book / "chapters" / "01_one.ipynb", "See @fig-loop, ", "See ")
    edit(book / "index.qmd", "We follow", "As @fig-bars shows, and @eq-missing: we follow")
    prose = f"chapters/01_one.ipynb, cell {chapter_cells()[0]['id']}"
    assert check_crossrefs(book) == [
        "index.qmd: @eq-missing refers to a label the book does not have",
        f"{prose}: @sec-two refers to a label the book does not have",
        f"{prose}: fig-loop is never referred to as @fig-loop",
    ]
    assert check_crossrefs(REPO_ROOT) == []

def test_a_label_defined_twice_is_reported(book: Path) -> None:
    edit(book / "index.qmd", "We follow", "## Again {#sec-one}\n\nWe follow")
    assert check_crossrefs(book) == [
        f"label sec-one is defined more than once: index.qmd; chapters/01_one.ipynb, cell "
        f"{chapter_cells()[0]['id']}",
    ]


def test_every_citation_key_is_in_references_bib(book: Path) -> None:
    edit(book / "index.qmd", "We follow @yao2023react", "We follow [@shinn2023; see @yao2023react]")
    edit(book / "references.bib", "@inproceedings", "@misc{unused,\n  title = {U},\n}\n\n"
                                                    "@inproceedings")
    assert check_citations(book) == [
        "index.qmd: @shinn2023 is cited but references.bib has no entry",
        "references.bib: unused is never cited, so the references page omits it",
    ]
    assert check_citations(REPO_ROOT) == []

def test_code_e_mail_and_punctuation_are_not_citations() -> None:
    text = ("Use `# @save` and ```@x```; write to me@example.com or https://x.org/@y; "
            "see @sec-budgets: and [-@fig-a], [@yao2023react, p. 3].")
    assert list(book_checks.references(text)) == ["sec-budgets", "fig-a", "yao2023react"]


def test_every_diagram_uses_the_mermaid_cell_form(book: Path) -> None:
    edit(book / "index.qmd", "We follow", "```mermaid\nflowchart LR\n  A --> B\n```\n\n"
                                          '<div class="mermaid">graph TD</div>\n\nWe follow')
    assert check_diagrams(book) == [
        "index.qmd: a diagram fenced as ```mermaid must be ```{mermaid}",
        'index.qmd: a <div class="mermaid"> must be a ```{mermaid} block',
    ]
    assert check_diagrams(REPO_ROOT) == []

def test_every_figure_has_a_label_a_caption_and_alt_text(book: Path) -> None:
    cells = chapter_cells()
    cells[0] = markdown_cell(CHAPTER_PROSE.replace('%%| fig-cap: "The loop."\n', ""))
    cells[1] = code_cell("show()", [SVG_OUTPUT])
    cells[2] = code_cell("#| label: tbl-costs\ntable", [TABLE_OUTPUT])
    write_notebook(book / "chapters" / "01_one.ipynb", cells)
    where = [f"chapters/01_one.ipynb, cell {cell['id']}" for cell in cells]
    assert check_figures(book) == [
        f"{where[1]}: a figure needs a #| label: fig-... option",
        f"{where[2]}: table tbl-costs needs a tbl-cap",
        f"{where[0]}: figure fig-loop needs a fig-cap",
        f"{where[1]}: a cell that draws an image needs a #| fig-alt",
    ]
    assert check_figures(REPO_ROOT) == []

def test_binder_takes_from_conda_forge_only_what_pip_cannot_install(book: Path) -> None:
    # One list of pins: a second copy from conda-forge could differ, or not exist there.
    edit(book / "environment.yml", "pip=24.0", "pip=24.0\n  - numpy=2.4.6\n  - jupyterlab")
    edit(book / "environment.yml", "      - -r requirements.txt", "      - pandas==3.1.1")
    edit(book / "environment.yml", "pytest==9.2.0", "pytest==9.1.0\n      - numpy==2.4.6")
    assert check_environment(book) == [
        "environment.yml: 'numpy=2.4.6' comes from conda-forge; only python, pip, jupyterlab "
        "may: install it with pip from requirements.txt",
        "environment.yml: 'jupyterlab' is not pinned to one version",
        "environment.yml: the pip section must hold '-r requirements.txt'",
        "environment.yml: pip requirement 'pandas==3.1.1' must be pinned as "
        "requirements-dev.txt pins it, which it does not",
        "environment.yml: pip requirement 'pytest==9.1.0' must be pinned as "
        "requirements-dev.txt pins it (pytest==9.2.0)",
        "environment.yml: 'numpy==2.4.6' is in requirements.txt already",
    ]
    edit(book / "environment.yml", "python=3.11.7", "python=3.11")
    edit(book / "environment.yml", "      - -e .\n", "")
    problems = check_environment(book)
    assert "environment.yml: python must be pinned to a full version, e.g. 3.11.7" in problems
    assert "environment.yml: the pip section must hold '-e .'" in problems
    assert check_environment(REPO_ROOT) == []


def test_binder_and_colab_badges_follow_the_repository_in_quarto_yml(book: Path) -> None:
    edit(book / "README.md", "v2/gh/example/tiny/main", "v2/gh/someone/else/main")
    edit(book / "index.qmd", "blob/main/chapters/01_one.ipynb", "blob/main/chapters/09_gone.ipynb")
    colab = COLAB.replace("01_one", "09_gone")
    assert check_launch_links(book) == [
        "README.md: https://mybinder.org/v2/gh/someone/else/main?labpath=chapters%2F01_one.ipynb "
        "opens someone/else@main, not example/tiny@main from _quarto.yml",
        f"index.qmd: {colab} opens chapters/09_gone.ipynb, which does not exist",
    ]
    assert check_launch_links(REPO_ROOT) == []

def test_a_notebook_that_imports_agentbook_installs_it_first(book: Path) -> None:
    install = book_checks.INSTALL_CELL.format(repo_url=REPO, ref=PINNED)
    exercises = book / "exercises"
    write_notebook(exercises / "good.ipynb", [code_cell(install), code_cell("import agentbook")])
    write_notebook(exercises / "none.ipynb", [code_cell("from agentbook import run_agent")])
    write_notebook(exercises / "late.ipynb", [code_cell("import agentbook.anatomy"),
                                              code_cell(install)])
    write_notebook(exercises / "noisy.ipynb", [
        code_cell(install, [{"output_type": "stream", "name": "stdout", "text": "Installing"}]),
        code_cell("from agentbook import *"),
    ])
    write_notebook(exercises / "other.ipynb", [
        code_cell(install.replace(REPO, "https://github.com/someone/else")),
        code_cell("from agentbook import *"),
    ])
    write_notebook(book / "notebooks" / "unpinned.ipynb", [
        code_cell(install.replace(PINNED, "")), code_cell("import agentbook"),
    ])
    assert check_install_cells(book) == [
        "exercises/late.ipynb: code cell 1 imports agentbook, but no install cell comes before it",
        "exercises/noisy.ipynb: the install cell has stored outputs; where the package is "
        "installed it must print nothing",
        "exercises/none.ipynb: code cell 1 imports agentbook, but no install cell comes before it",
        "exercises/other.ipynb: the install cell differs from the book's, which installs the "
        f"release {PINNED[:12]} (see INSTALL_CELL in scripts/checks/book_checks.py)",
        "notebooks/unpinned.ipynb: the install cell differs from the book's, which installs the "
        f"release {PINNED[:12]} (see INSTALL_CELL in scripts/checks/book_checks.py)",
    ]
    (book / "pyproject.toml").write_text('[project]\nname = "tiny"\n')
    assert check_install_cells(book) == [
        "pyproject.toml: [tool.agentbook] has no release, so the install cells have no commit "
        "to pin"]
    assert check_install_cells(REPO_ROOT) == []

def test_the_pinned_release_is_a_commit_holding_the_package_as_it_is(tmp_path: Path) -> None:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True,
                              capture_output=True, text=True).stdout.strip()

    def pin(commit: str) -> list[str]:
        (tmp_path / "pyproject.toml").write_text(f'[tool.agentbook]\nrelease = "{commit}"\n')
        return book_checks.check_release(tmp_path)

    (tmp_path / "agentbook").mkdir()
    (tmp_path / "agentbook" / "kernel.py").write_text("A = 1\n")
    git("init", "-q")
    git("-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "one", "--allow-empty")
    git("add", "agentbook")
    git("-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "two")
    first, second = git("rev-list", "--reverse", "HEAD").split()
    assert pin(second) == []
    assert pin("v0.1.0") == [
        "pyproject.toml: [tool.agentbook] release must be the full hash of a commit"]
    assert pin(PINNED) == [
        f"pyproject.toml: release {PINNED[:12]} is not a commit of this repository"]
    assert pin(first) == [
        f"agentbook/ has changed since the pinned release {first[:12]}: commit it, pin that "
        "commit in pyproject.toml and run `python3 dev.py book`"]
    (tmp_path / "agentbook" / "kernel.py").write_text("A = 2\n")  # edited since the pin
    assert pin(second) != []
    assert book_checks.check_release(REPO_ROOT) == []


def test_the_install_cell_prints_nothing_where_agentbook_is_installed() -> None:
    """Run here, where the package is installed: the cell must neither print nor install."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        exec(book_checks.INSTALL_CELL.format(repo_url=REPO, ref=PINNED), {})
    assert out.getvalue() == ""
