"""Make the rendered EPUB one that EPUBCheck accepts: a Quarto post-render step.

    python scripts/build/clean_epub.py [BOOK_DIR]   (default: $QUARTO_PROJECT_OUTPUT_DIR or _book)

Quarto's EPUB carries four things from the web pages that an EPUB may not hold, and this
rewrites each file of BOOK_DIR/*.epub that has them:

- scripts: the CDN require.js and jQuery tags Quarto adds for HTML outputs, and the run
  explorer's JSON data (its stepper needs a browser's script; the EPUB keeps the transcript
  printed beside it, which is the explorer's own fallback);
- pandas' `<style scoped>`, HTML's boolean attribute, which is not XML, so the whole chapter
  failed to parse; the style only aligns table headers, so it goes;
- links to a book source file (`references.qmd`), which Quarto resolves for the web pages
  but not in the EPUB: they point at the EPUB page whose first section is that file's;
- an `alt` on a figure's `<div>`, where Quarto's EPUB repeats a figure's alt text (`fig-alt`)
  besides putting it on the `<img>`; only images may carry it, so the div's copy goes;
- matplotlib's empty glyph outlines (`<path id="..."/>` for a space), which SVG requires to
  have `d`: they get the empty path data SVG allows.

Every XHTML page is then parsed as XML, so a page that still would not open fails the render.
Standard library only: Quarto runs it with whichever Python is on PATH.
"""

from __future__ import annotations

import os
import re
import sys
import zipfile
from pathlib import Path
from xml.dom import minidom
from xml.parsers.expat import ExpatError

SCRIPT = re.compile(r"[ \t]*<script\b[^>]*?(?:/>|>.*?</script>)\n?", re.DOTALL)
SCOPED_STYLE = re.compile(r"<style scoped>.*?</style>\n?", re.DOTALL)
SOURCE_LINK = re.compile(r'href="([\w-]+)\.(?:qmd|ipynb)(#[^"]*)?"')
FIRST_SECTION = re.compile(r'<section id="([^"]+)"')
DIV_ALT = re.compile(r'(<div\b[^>]*?) alt="[^"]*"')
EMPTY_GLYPH = re.compile(r"<path\b(?![^>]*\sd=)([^>]*?)/>")


def page_of_each_section(pages: dict[str, str]) -> dict[str, str]:
    """The EPUB page that each first-section id opens, e.g. "references" -> "ch004.xhtml"."""
    found = {}
    for name, text in pages.items():
        first = FIRST_SECTION.search(text)
        if first:
            found[first.group(1)] = Path(name).name
    return found


def clean_page(text: str, section_pages: dict[str, str]) -> str:
    """One XHTML page without scripts, scoped styles or alt text on divs, its source-file links
    resolved."""
    text = DIV_ALT.sub(r"\1", SCOPED_STYLE.sub("", SCRIPT.sub("", text)))

    def resolved(link: re.Match[str]) -> str:
        page = section_pages.get(link.group(1))
        if page is None:
            raise ValueError(f"a link to {link.group(0)} names no page of the EPUB")
        return f'href="{page}{link.group(2) or ""}"'

    return SOURCE_LINK.sub(resolved, text)


def clean_svg(text: str) -> str:
    return EMPTY_GLYPH.sub(r'<path d=""\1/>', text)


def parse_problem(name: str, text: str) -> str | None:
    try:
        minidom.parseString(text.encode("utf-8"))
    except ExpatError as error:
        return f"{name}: not well-formed XML after cleaning ({error})"
    return None


def clean_epub(path: Path) -> None:
    """Rewrite the EPUB at ``path`` in place; raise ValueError if a page stays unreadable."""
    with zipfile.ZipFile(path) as book:
        entries = [(info, book.read(info)) for info in book.infolist()]
    pages = {info.filename: data.decode("utf-8") for info, data in entries
             if info.filename.endswith((".xhtml", ".opf"))}
    section_pages = page_of_each_section(pages)
    rewritten = []
    problems = []
    for info, data in entries:
        if info.filename.endswith(".xhtml"):
            text = clean_page(data.decode("utf-8"), section_pages)
            problems.append(parse_problem(info.filename, text))
            data = text.encode("utf-8")
        elif info.filename.endswith(".svg"):
            data = clean_svg(data.decode("utf-8")).encode("utf-8")
        rewritten.append((info, data))
    found = [problem for problem in problems if problem]
    if found:
        raise ValueError("\n".join(found))
    # The OCF rules: `mimetype` first and stored uncompressed; the rest as they were.
    temporary = path.with_suffix(".tmp")
    with zipfile.ZipFile(temporary, "w") as book:
        for info, data in rewritten:
            book.writestr(info, data, compress_type=info.compress_type)
    temporary.replace(path)


def main(argv: list[str]) -> int:
    book = Path(argv[0] if argv else os.environ.get("QUARTO_PROJECT_OUTPUT_DIR") or "_book")
    for path in sorted(book.glob("*.epub")):
        try:
            clean_epub(path)
        except ValueError as problem:
            print(f"{path}: {problem}", file=sys.stderr)
            return 1
        print(f"{path.name}: scripts, scoped styles and source links cleaned for EPUBCheck")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
