"""Reader notebooks: every chapter without Quarto's markup, for JupyterLab, Binder and Colab.

    python -m scripts.build.readers           write notebooks/
    python -m scripts.build.readers --check   exit 1 with a diff when one is stale

Each listed notebook gets a namesake in `notebooks/`: its code cells byte for byte less their
`#|` lines, its markdown converted by pandoc and `filters/reader-*.lua` (README: Releases).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import string
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pypandoc

from scripts.build.generated import read_files, stale, sync, write
from scripts.checks.book_checks import (
    CODE_SPAN,
    bibliography,
    cell_source,
    is_mermaid,
    listed_files,
    load_config,
    read_cells,
    references,
    repository,
    split_fences,
)

ROOT = Path(__file__).resolve().parents[2]
READERS_DIR = "notebooks"
FILTERS = ("reader-callouts.lua", "reader-diagrams.lua", "reader-crossref.lua")
# The rendered book: GitHub Pages of `book: repo-url`; a chapter's page is its path, .html.
RENDERED_BOOK = "https://{owner}.github.io/{name}/"
# Pandoc's markdown as Quarto writes it; no automatic heading ids, so that an id is a label.
MARKDOWN = ("+citations+fenced_divs+header_attributes+bracketed_spans+link_attributes+footnotes"
            "+fenced_code_attributes+table_captions+table_attributes+implicit_figures+native_divs"
            "+native_spans+raw_attribute+simple_tables+grid_tables+multiline_tables"
            "+inline_code_attributes+definition_lists-auto_identifiers-gfm_auto_identifiers")
# Pandoc reads ```{mermaid} as inline code; like Quarto, we spell it ```{.mermaid} first.
MERMAID_FENCE = re.compile(r"^(\s*`{3,})\s*\{mermaid\}\s*$", re.MULTILINE)
UNKNOWN_CITATION = re.compile(r"Citeproc: citation (\S+) not found")

# What must never reach a reader notebook's prose (code may show any of it).
LEFTOVER_MARKUP = {
    "a Quarto attribute block": re.compile(r"\{[#.][A-Za-z][\w-]*"),
    "a div fence": re.compile(r"^\\?:::", re.MULTILINE),
    "a shortcode": re.compile(r"\{\{\\?<"),
    "a %%| diagram option": re.compile(r"^%%\|", re.MULTILINE),
}
MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.DOTALL)


class ReaderError(Exception):
    """A chapter cannot be converted; the message names the file, the cell and the reason."""


@dataclass(frozen=True)
class Book:
    """The book's files in reading order, with each one's chapter number."""

    root: Path
    files: list[tuple[str, str, bool]]  # (path, "1" or "A" or "" if unnumbered, appendix)
    book_url: str


def title_is_numbered(path: Path) -> bool:
    """Whether a file's title, its first level-1 heading, is numbered (no `.unnumbered`)."""
    texts = ([cell_source(cell) for cell in read_cells(path) if cell["cell_type"] == "markdown"]
             if path.suffix == ".ipynb" else [path.read_text(encoding="utf-8")])
    title = re.search(r"^# .*$", split_fences("\n".join(texts))[0], re.MULTILINE)
    return not (title and re.search(r"\{[^{}]*(\.unnumbered|(?<![\w-])-(?![\w-]))", title[0]))


def read_book(root: Path) -> Book:
    config = load_config(root)
    slug, _ = repository(config)
    if not slug:
        raise ReaderError("_quarto.yml: book: repo-url must be a https://github.com/OWNER/NAME "
                          "address, from which the rendered book's address follows")
    owner, name = slug.split("/")
    appendices = set(listed_files({"book": {"appendices":
                                            (config.get("book") or {}).get("appendices") or []}}))
    files: list[tuple[str, str, bool]] = []
    chapters = letters = 0
    for page in listed_files(config):
        if not (root / page).is_file():
            raise ReaderError(f"_quarto.yml lists {page}, which does not exist")
        appendix = page in appendices
        number = ""
        if title_is_numbered(root / page):
            chapters, letters = chapters + (not appendix), letters + appendix
            number = string.ascii_uppercase[letters - 1] if appendix else str(chapters)
        files.append((page, number, appendix))
    return Book(root, files, RENDERED_BOOK.format(owner=owner, name=name))


def pandoc_input(path: Path) -> tuple[str, str]:
    """A listed file as pandoc reads it, and the format to read it as. A notebook's code
    cells go without their outputs, which the reader notebook takes from the chapter."""
    if path.suffix != ".ipynb":
        return MERMAID_FENCE.sub(r"\1{.mermaid}", path.read_text(encoding="utf-8")), \
            "markdown" + MARKDOWN
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = []
        else:
            cell["source"] = MERMAID_FENCE.sub(r"\1{.mermaid}", cell_source(cell))
    return json.dumps(notebook), "ipynb" + MARKDOWN


def run_pandoc(book: Book, page: str, mode: str, targets: dict[str, Any]) -> str:
    """Run pandoc and the filters over one listed file; return what it writes."""
    _, chapter, appendix = next(entry for entry in book.files if entry[0] == page)
    text, reader = pandoc_input(book.root / page)
    filters = [arg for name in FILTERS
               for arg in ("--lua-filter", str(ROOT / "filters" / name))]
    if mode == "collect":
        writer, extra = "markdown", filters
    else:
        writer, extra = "ipynb", [
            *filters, "--citeproc", f"--bibliography={book.root / bibliography(book.root)}",
            "--metadata=link-citations:true", "--lua-filter",
            str(ROOT / "filters" / "reader-references.lua")]
    environment = dict(os.environ, READER_MODE=mode, READER_PAGE=page, READER_CHAPTER=chapter,
                       READER_APPENDIX="1" if appendix else "", READER_BOOK_URL=book.book_url,
                       READER_TARGETS=json.dumps(targets))
    done = subprocess.run([pypandoc.get_pandoc_path(), "-f", reader, "-t",
                           writer + "-fenced_code_attributes", "--wrap=preserve", *extra],
                          input=text, capture_output=True, text=True, env=environment)
    if failure := re.search(r"READER-ERROR: (.*)", done.stderr):  # from reader-crossref.lua
        raise ReaderError(f"{page}{',' if failure[1].startswith('cell ') else ':'} {failure[1]}")
    if missing := UNKNOWN_CITATION.search(done.stderr):
        raise ReaderError(f"{page}: @{missing[1]} is cited but the bibliography has no entry")
    if done.returncode != 0:
        raise ReaderError(f"{page}: pandoc failed: {done.stderr.strip()}")
    return done.stdout


def all_targets(book: Book) -> dict[str, Any]:
    """Every label of the book with its words and page, from each listed file."""
    with ThreadPoolExecutor() as pool:
        found = pool.map(lambda entry: json.loads(run_pandoc(book, entry[0], "collect", {})),
                         book.files)
    targets: dict[str, Any] = {}
    for labels in found:
        for label, target in (labels or {}).items():
            if label in targets:
                raise ReaderError(f"the label {label} is defined in {targets[label]['page']} "
                                  f"and in {target['page']}")
            targets[label] = target
    return targets


def reader_notebook(book: Book, page: str, targets: dict[str, Any]) -> dict[str, Any]:
    """One chapter's reader notebook: pandoc's markdown cells, the chapter's code cells."""
    converted = json.loads(run_pandoc(book, page, "convert", targets))
    chapter = json.loads((book.root / page).read_text(encoding="utf-8"))
    originals = {cell["id"]: cell for cell in chapter["cells"]}
    cells = []
    for cell in converted["cells"]:
        original = originals.get(cell.get("id"))
        if original is None:  # a caption or the references, added by the filters
            cells.append(dict(cell, metadata={}, source=cell_source(cell).strip()))
        elif original["cell_type"] == "code":
            lines = cell_source(original).split("\n")
            cells.append(dict(original, source="\n".join(
                line for line in lines if not line.startswith("#|"))))
        else:
            cells.append(dict(original, source=cell_source(cell).strip()))
    chapter["cells"] = cells
    return chapter


def reader_notebooks(root: Path) -> dict[str, str]:
    """Every reader notebook's path and text, built in memory from the chapters."""
    book = read_book(root)
    targets = all_targets(book)
    pages = [page for page, _, _ in book.files if page.endswith(".ipynb")]
    with ThreadPoolExecutor() as pool:
        notebooks = list(pool.map(lambda page: reader_notebook(book, page, targets), pages))
    readers: dict[str, str] = {}
    for page, notebook in zip(pages, notebooks, strict=True):
        name = f"{READERS_DIR}/{Path(page).name}"
        check_converted(name, notebook)
        readers[name] = nbformat.writes(nbformat.from_dict(notebook)) + "\n"
    return readers


def leftover_markup(text: str) -> list[str]:
    """What Quarto markup is left in a piece of markdown, outside code."""
    prose, fences = split_fences(text)
    prose = MATH.sub(" ", CODE_SPAN.sub(" ", prose))
    found = [f"@{key}" for key in references(text)]
    found += [name for name, pattern in LEFTOVER_MARKUP.items() if pattern.search(prose)]
    return found + ["a {mermaid} block" for fence in fences if is_mermaid(fence)]


def check_converted(name: str, notebook: dict[str, Any]) -> None:
    """Fail, naming the cell, when Quarto markup survived the conversion."""
    for cell in notebook["cells"]:
        source = cell_source(cell)
        found = (leftover_markup(source) if cell["cell_type"] == "markdown" else
                 ["a #| cell option"] if re.search(r"^#\|", source, re.MULTILINE) else [])
        if found:
            raise ReaderError(f"{name}, cell {cell['id']}: the reader notebook still has "
                              f"{', '.join(found)}")


def committed_readers(root: Path, readers: dict[str, str]) -> dict[str, str]:
    """The reader notebooks on disk: those wanted, and any whose chapter is gone."""
    return read_files(root, [*readers, *(path.relative_to(root).as_posix()
                                        for path in (root / READERS_DIR).glob("*.ipynb"))])


def write_readers(root: Path, readers: dict[str, str]) -> list[str]:
    """Write the reader notebooks that changed, remove those whose chapter is gone."""
    return write(root, readers, committed_readers(root, readers))


def stale_readers(root: Path) -> list[str]:
    """The reader notebooks that differ from what the chapters give, or should not exist."""
    readers = reader_notebooks(root)
    return stale(committed_readers(root, readers), readers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a reader notebook is stale")
    args = parser.parse_args(argv)
    try:
        readers = reader_notebooks(ROOT)
    except ReaderError as error:
        print(error, file=sys.stderr)
        return 2
    return sync(ROOT, readers, committed_readers(ROOT, readers), args.check,
                "reader notebooks", "python -m scripts.build.readers")


if __name__ == "__main__":
    sys.exit(main())
