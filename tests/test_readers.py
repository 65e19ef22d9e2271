"""The reader notebooks in notebooks/: current, free of Quarto's markup, and faithful to the
chapters' code and outputs; and the converter, on a small book where every number is known.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
import yaml

from scripts.build import readers
from scripts.checks.book_checks import cell_source, launch_target, launch_urls, read_cells
from scripts.build.readers import ReaderError

REPO_ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((REPO_ROOT / "chapters").glob("*.ipynb"))

# --------------------------------------------------------------------------- the real book


def test_every_reader_notebook_is_up_to_date() -> None:
    assert readers.stale_readers(REPO_ROOT) == [], "run: python -m scripts.build.readers"


def test_every_chapter_has_a_reader_notebook() -> None:
    names = sorted(path.name for path in (REPO_ROOT / readers.READERS_DIR).glob("*.ipynb"))
    assert names == [path.name for path in CHAPTERS]


def without_options(source: str) -> str:
    return "\n".join(line for line in source.split("\n") if not line.startswith("#|"))


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[path.stem for path in CHAPTERS])
def test_code_cells_and_outputs_are_the_chapters_byte_for_byte(chapter: Path) -> None:
    """What nbval checks in the chapter holds in the reader notebook: the same code, in the
    same order, with the same outputs, execution counts and tags."""
    reader = REPO_ROOT / readers.READERS_DIR / chapter.name
    ours = [cell for cell in read_cells(chapter) if cell["cell_type"] == "code"]
    theirs = [cell for cell in read_cells(reader) if cell["cell_type"] == "code"]
    assert [cell["id"] for cell in theirs] == [cell["id"] for cell in ours]
    for mine, copy in zip(ours, theirs, strict=True):
        assert cell_source(copy) == without_options(cell_source(mine)), mine["id"]
        assert json.dumps(copy["outputs"]) == json.dumps(mine["outputs"]), mine["id"]
        assert copy["execution_count"] == mine["execution_count"], mine["id"]
        assert copy["metadata"] == mine["metadata"], mine["id"]
    markdown_ids = [cell["id"] for cell in read_cells(chapter) if cell["cell_type"] == "markdown"]
    reader_ids = [cell["id"] for cell in read_cells(reader)]
    assert [name for name in reader_ids if name in markdown_ids] == markdown_ids


QUARTO_ONLY = {
    "attribute block": re.compile(r"\{[#.][a-z]"),
    "cross-reference": re.compile(r"(?<![\w@.:/])-?@(?:sec|fig|tbl|eq)-"),
    "citation": re.compile(r"(?<![\w@.:/])\[?-?@[a-z]+\d{4}"),
    "div fence": re.compile(r"^:::", re.MULTILINE),
    "{mermaid} block": re.compile(r"^```\{mermaid\}", re.MULTILINE),
    "diagram option": re.compile(r"^%%\|", re.MULTILINE),
    "shortcode": re.compile(r"\{\{<"),
}


def prose(text: str) -> str:
    """Markdown without fenced code (what the book shows verbatim) and code spans."""
    text = re.sub(r"^(```+|~~~+)(?!\s*(?:mermaid|\{mermaid\})\s*$).*?^\1\s*$", " ", text,
                  flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"`[^`\n]+`", " ", text)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[path.stem for path in CHAPTERS])
def test_no_quarto_markup_survives_in_a_reader_notebook(chapter: Path) -> None:
    reader = REPO_ROOT / readers.READERS_DIR / chapter.name
    for cell in read_cells(reader):
        source = cell_source(cell)
        if cell["cell_type"] == "code":
            assert not re.search(r"^#\|", source, re.MULTILINE), cell["id"]
            continue
        text = prose(source)
        found = [name for name, pattern in QUARTO_ONLY.items() if pattern.search(text)]
        assert found == [], f"{reader.name}, cell {cell['id']}"


def test_the_checks_above_see_quarto_markup() -> None:
    """The patterns of the last test find each kind of markup they are meant to find."""
    chapter = "\n".join(cell_source(cell) for cell in read_cells(CHAPTERS[0]))
    found = {name for name, pattern in QUARTO_ONLY.items() if pattern.search(prose(chapter))}
    assert {"attribute block", "cross-reference", "citation", "div fence",
            "{mermaid} block", "diagram option"} <= found


def test_badges_and_launch_links_open_the_reader_notebooks() -> None:
    for name in ("README.md", "index.qmd"):
        urls = list(launch_urls((REPO_ROOT / name).read_text(encoding="utf-8")))
        assert urls, name
        for url in urls:
            _, _, path = launch_target(url)
            assert path.startswith(f"{readers.READERS_DIR}/"), url
            assert (REPO_ROOT / path).is_file(), url
            if "mybinder.org" in url:
                assert "?labpath=" in url, f"{url} must open JupyterLab"
    launch_links = (REPO_ROOT / "filters" / "launch-links.lua").read_text(encoding="utf-8")
    assert f'READERS_DIR = "{readers.READERS_DIR}"' in launch_links


def test_binder_has_otter_grader_and_a_jupyterlab_that_draws_mermaid() -> None:
    environment = yaml.safe_load((REPO_ROOT / "environment.yml").read_text(encoding="utf-8"))
    conda = [str(entry) for entry in environment["dependencies"] if isinstance(entry, str)]
    pip = next(entry["pip"] for entry in environment["dependencies"] if isinstance(entry, dict))
    lab = next(entry for entry in conda if entry.startswith("jupyterlab="))
    assert tuple(int(part) for part in lab.split("=")[1].split(".")[:2]) >= (4, 1)
    assert any(re.fullmatch(r"otter-grader==[\d.]+", line) for line in pip)


# --------------------------------------------------------------------------- a small book

CONFIG = """\
project:
  type: book
book:
  title: tiny
  repo-url: https://github.com/example/tiny
  repo-branch: main
  chapters:
    - index.qmd
    - chapters/01_one.ipynb
    - chapters/02_two.ipynb
    - references.qmd
  appendices:
    - chapters/a1_extra.ipynb
bibliography: references.bib
crossref:
  chapters: true
"""

BIB = """\
@inproceedings{yao2023react,
  author    = {Yao, Shunyu and others},
  title     = {{ReAct}: Synergizing Reasoning and Acting},
  booktitle = {International Conference on Learning Representations},
  year      = {2023},
}

@misc{anthropic2024,
  author       = {{Anthropic}},
  title        = {Building Effective Agents},
  year         = 2024,
  howpublished = {\\url{https://example.com/agents}},
}

@book{doe2020,
  author    = {Jane Doe and Richard Roe},
  title     = {A Book, {with} Braces},
  publisher = {Press},
  year      = {2020},
}
"""

ONE_TITLE = """\
# One {#sec-one}

Intro, as @yao2023react showed [see @anthropic2024, p. 3; @doe2020]. Mail me@example.com.

::: {.callout-tip}
## Remember @sec-later

Inside a callout: @fig-flow.

```python
x = "@sec-one stays in code"
```
:::

::: {.callout-note}
No title here.
:::"""

ONE_BODY = """\
## First part {#sec-first}

### Deeper {#sec-deeper}

```{mermaid}
%%| label: fig-flow
%%| fig-cap: "The flow, per @sec-first."
flowchart LR
  A --> B
```

## Unnumbered aside {.unnumbered}

$$
x = 1
$$ {#eq-one}

See @eq-one, [-@fig-flow], `@sec-one in a code span`, and @tbl-pipe.

| a | b |
|---|---|
| 1 | 2 |

: A pipe table. {#tbl-pipe}

## Later {#sec-later}

![A picture.](../figures/x.svg){#fig-picture}

::: {.column-margin}
A margin note with [a link](https://example.com){target="_blank"} and [small]{.smallcaps}.
:::"""

TWO = """\
# Two {#sec-two}

## Only part

Back to @sec-deeper, @fig-plot and @sec-extra; forward to @fig-extra."""

EXTRA = """\
# Extra {#sec-extra}

## Appendix part {#sec-extra-part}

```{mermaid}
%%| label: fig-extra
%%| fig-cap: "Extra."
flowchart LR
  C --> D
```

See @fig-extra in @sec-extra-part of @sec-extra, and @sec-one."""

SVG = {"output_type": "display_data", "metadata": {},
       "data": {"image/svg+xml": "<svg/>", "text/plain": "<Figure>"}}
TABLE = {"output_type": "execute_result", "execution_count": 2, "metadata": {},
         "data": {"text/plain": "   a\n0  1"}}


def markdown_cell(cell_id: str, source: str) -> dict[str, Any]:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": source}


def code_cell(cell_id: str, source: str, count: int | None = None,
              outputs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"cell_type": "code", "execution_count": count, "id": cell_id,
            "metadata": {"tags": ["nbval-skip"]} if cell_id == "live" else {},
            "outputs": outputs or [], "source": source}


def write_notebook(path: Path, cells: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    notebook = {"cells": cells, "metadata": {"kernelspec": {"name": "python3"}},
                "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(notebook), encoding="utf-8")


def make_book(tmp_path: Path) -> Path:
    (tmp_path / "_quarto.yml").write_text(CONFIG, encoding="utf-8")
    (tmp_path / "index.qmd").write_text("# Preface {.unnumbered}\n\nSee @sec-one.\n")
    (tmp_path / "references.qmd").write_text("# References {.unnumbered}\n\n::: {#refs}\n:::\n")
    (tmp_path / "references.bib").write_text(BIB, encoding="utf-8")
    write_notebook(tmp_path / "chapters" / "01_one.ipynb", [
        markdown_cell("title", ONE_TITLE),
        code_cell("plot", '#| label: fig-plot\n#| fig-cap: "A plot of @sec-first."\nplot()', 1,
                  [SVG]),
        code_cell("table", '#| label: tbl-frame\n#| tbl-cap: "A frame."\nframe', 2, [TABLE]),
        markdown_cell("body", ONE_BODY),
        code_cell("live", "#| eval: false\nlive()"),
    ])
    write_notebook(tmp_path / "chapters" / "02_two.ipynb", [markdown_cell("title", TWO)])
    write_notebook(tmp_path / "chapters" / "a1_extra.ipynb", [markdown_cell("title", EXTRA)])
    return tmp_path


@pytest.fixture
def book(tmp_path: Path) -> Path:
    return make_book(tmp_path)


def converted(book: Path) -> dict[str, list[dict[str, Any]]]:
    """Each reader notebook's cells, read back as Jupyter reads them."""
    return {name: nbformat.reads(text, as_version=4).cells
            for name, text in readers.reader_notebooks(book).items()}


def sources(cells: list[dict[str, Any]]) -> dict[str, str]:
    return {cell["id"]: cell_source(cell) for cell in cells}


BOOK = "https://example.github.io/tiny/"


@pytest.fixture(scope="module")
def notebooks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """The small book's reader notebooks, converted once for the tests that only read them."""
    return converted(make_book(tmp_path_factory.mktemp("tiny")))


def test_one_reader_notebook_per_notebook_chapter_and_appendix(
        notebooks: dict[str, list[dict[str, Any]]]) -> None:
    assert sorted(notebooks) == ["notebooks/01_one.ipynb", "notebooks/02_two.ipynb",
                                 "notebooks/a1_extra.ipynb"]
    cells = notebooks["notebooks/01_one.ipynb"]
    assert [cell["id"] for cell in cells] == [
        "title", "plot", "plot-caption", "table-caption", "table", "body", "live", "references"]
    for cell in (cell for cells in notebooks.values() for cell in cells):
        if cell["cell_type"] == "markdown":
            assert readers.leftover_markup(cell_source(cell)) == [], cell["id"]


def assert_in_order(text: str, pieces: list[str]) -> None:
    positions = [text.find(piece) for piece in pieces]
    assert -1 not in positions, [piece for piece in pieces if piece not in text]
    assert positions == sorted(positions)


def flat(text: str) -> str:
    """Markdown with its line breaks as spaces, so that wrapping does not matter."""
    return re.sub(r"\s+", " ", text)


def test_headings_references_callouts_and_citations_read_as_in_the_book(
        notebooks: dict[str, list[dict[str, Any]]]) -> None:
    title = flat(sources(notebooks["notebooks/01_one.ipynb"])["title"])
    assert title.startswith('# 1 One<a id="sec-one"></a>')
    assert "as Yao et al. ([2023](#ref-yao2023react)) showed" in title
    assert "(see [Anthropic 2024, 3](#ref-anthropic2024); [Doe and Roe 2020](#ref-doe2020))" \
        in title
    assert "me@example.com" in title
    assert "> **Remember [Section 1.2](#sec-later)** > > Inside a callout: " \
           "[Figure 1.2](#fig-flow)." in title
    assert 'x = "@sec-one stays in code"' in title
    assert title.endswith("> **Note** > > No title here.")


def test_figures_tables_and_equations_are_numbered_in_reading_order(
        notebooks: dict[str, list[dict[str, Any]]]) -> None:
    text = sources(notebooks["notebooks/01_one.ipynb"])
    assert flat(text["plot-caption"]) == ('<div id="fig-plot"></div> '
                                          "Figure 1.1: A plot of [Section 1.1](#sec-first).")
    assert flat(text["table-caption"]) == '<div id="tbl-frame"></div> Table 1.1: A frame.'
    body = flat(text["body"])
    expected = [
        '## 1.1 First part<a id="sec-first"></a>', '### 1.1.1 Deeper<a id="sec-deeper"></a>',
        '<div id="fig-flow"></div>', "mermaid flowchart LR A --> B ```",
        "Figure 1.2: The flow, per [Section 1.1](#sec-first).",
        f"[the rendered book]({BOOK}chapters/01_one.html#fig-flow)",
        "## Unnumbered aside", '<div id="eq-one"></div>', "x = 1 \\tag{1.1}",
        "See [Equation 1.1](#eq-one), [1.2](#fig-flow), `@sec-one in a code span`, and "
        "[Table 1.2](#tbl-pipe).",
        '<div id="tbl-pipe"></div>', "Table 1.2: A pipe table.", "| a | b |",
        '## 1.2 Later<a id="sec-later"></a>', '<div id="fig-picture"></div>',
        "![A picture.](../figures/x.svg)", "Figure 1.3: A picture.",
        "A margin note with [a link](https://example.com) and small."]
    assert_in_order(body, expected)


def test_code_cells_lose_their_options_and_keep_everything_else(
        notebooks: dict[str, list[dict[str, Any]]]) -> None:
    cells = {cell["id"]: cell for cell in notebooks["notebooks/01_one.ipynb"]}
    assert cell_source(cells["plot"]) == "plot()"
    assert cells["plot"]["outputs"] == [SVG] and cells["plot"]["execution_count"] == 1
    assert cell_source(cells["live"]) == "live()"
    assert cells["live"]["metadata"] == {"tags": ["nbval-skip"]}


def test_the_works_cited_are_listed_at_the_end(
        notebooks: dict[str, list[dict[str, Any]]]) -> None:
    references = flat(sources(notebooks["notebooks/01_one.ipynb"])["references"])
    expected = ["## References", '<div id="ref-anthropic2024"></div>',
                "Anthropic. 2024. *Building Effective Agents*. <https://example.com/agents>.",
                '<div id="ref-doe2020"></div>', "Doe, Jane, and Richard Roe. 2020.",
                '<div id="ref-yao2023react"></div>', "Yao, Shunyu et al. 2023. “ReAct: "
                "Synergizing Reasoning and Acting.” *International Conference on Learning "
                "Representations*."]
    assert_in_order(references, expected)


def test_references_to_other_files_link_to_the_rendered_book(
        notebooks: dict[str, list[dict[str, Any]]]) -> None:
    two = flat(sources(notebooks["notebooks/02_two.ipynb"])["title"])
    assert two == (
        '# 2 Two<a id="sec-two"></a> '
        "## 2.1 Only part "
        f"Back to [Section 1.1.1]({BOOK}chapters/01_one.html#sec-deeper), "
        f"[Figure 1.1]({BOOK}chapters/01_one.html#fig-plot) and "
        f"[Appendix A]({BOOK}chapters/a1_extra.html#sec-extra); "
        f"forward to [Figure A.1]({BOOK}chapters/a1_extra.html#fig-extra)."
    )
    extra = flat(sources(notebooks["notebooks/a1_extra.ipynb"])["title"])
    assert extra.startswith('# Appendix A — Extra<a id="sec-extra"></a> '
                            '## A.1 Appendix part<a id="sec-extra-part"></a>')
    assert extra.endswith(
        "See [Figure A.1](#fig-extra) in [Section A.1](#sec-extra-part) of "
        f"[Appendix A](#sec-extra), and [Chapter 1]({BOOK}chapters/01_one.html#sec-one).")
    assert "references" not in sources(notebooks["notebooks/02_two.ipynb"])


def edit_cell(path: Path, cell_id: str, source: str) -> None:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    next(cell for cell in notebook["cells"] if cell["id"] == cell_id)["source"] = source
    path.write_text(json.dumps(notebook), encoding="utf-8")


@pytest.mark.parametrize(("source", "problem"), [
    ("# Two\n\nSee @fig-nowhere.", "@fig-nowhere refers to a label the book does not have"),
    ("# Two\n\nAs [@nobody2020] said.", "@nobody2020 is cited but the bibliography has no entry"),
    ("# Two\n\n## Again {#sec-first}",
     "the label sec-first is defined in chapters/01_one.ipynb and in chapters/02_two.ipynb"),
    ("# Two\n\n# Another title",
     "a chapter has one level-1 heading, its title; found another: 'Another title'"),
    ("# Two\n\n{{< video https://example.com >}}",
     "the reader notebook still has a shortcode"),
])
def test_what_cannot_be_converted_is_a_clear_error(book: Path, source: str,
                                                   problem: str) -> None:
    edit_cell(book / "chapters" / "02_two.ipynb", "title", source)
    with pytest.raises(ReaderError) as error:
        readers.reader_notebooks(book)
    where = "notebooks/02_two.ipynb" if "still has" in problem else "chapters/02_two.ipynb"
    if "defined in" in problem:
        assert str(error.value) == problem
    else:
        cell = "" if "bibliography" in problem else ", cell title"
        assert str(error.value) == f"{where}{cell}: {problem}"


def test_a_stale_or_orphaned_reader_notebook_is_found_and_rewritten(book: Path) -> None:
    assert readers.stale_readers(book) == ["notebooks/01_one.ipynb", "notebooks/02_two.ipynb",
                                           "notebooks/a1_extra.ipynb"]
    assert len(readers.write_readers(book, readers.reader_notebooks(book))) == 3
    assert readers.stale_readers(book) == []
    edit_cell(book / "chapters" / "02_two.ipynb", "title", "# Two {#sec-two}\n\nChanged.")
    (book / "notebooks" / "03_gone.ipynb").write_text("{}", encoding="utf-8")
    assert readers.stale_readers(book) == ["notebooks/02_two.ipynb", "notebooks/03_gone.ipynb"]
    assert readers.write_readers(book, readers.reader_notebooks(book)) == [
        "notebooks/02_two.ipynb", "notebooks/03_gone.ipynb"]
    assert not (book / "notebooks" / "03_gone.ipynb").exists()
    assert readers.stale_readers(book) == []
