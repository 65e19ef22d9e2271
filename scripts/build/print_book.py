"""Print the rendered book to one PDF, _book/agentbook.pdf, with Chromium.

    python -m scripts.build.print_book [BOOK_DIR]

Quarto's PDF formats need typst or LaTeX; Chromium, which measures the pages anyway, prints
them instead: every listed page in reading order, diagrams drawn, joined into one document
printed with the book's print stylesheet (book.scss), each chapter on a new page. The PDF
is tagged (its structure readable by assistive technology) and has an outline, the viewer's
bookmarks, which Chromium builds from the headings: a chapter and each numbered section.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scripts.checks.book_checks import listed_files, load_config
from scripts.checks.measure_pages import PAGE_TIMEOUT, chromium_browser, open_page

ROOT = Path(__file__).resolve().parents[2]
PDF_NAME = "agentbook.pdf"  # the sidebar's download link (`downloads` in _quarto.yml)

# A page's content with addresses that still hold in another page: images absolute, links to
# the book's pages as in-document anchors.
GATHER_JS = """() => {
  const main = document.querySelector("main");
  for (const image of main.querySelectorAll("img[src]")) image.src = image.src;
  for (const link of main.querySelectorAll("a[href]"))
    if (new URL(link.href).origin === location.origin)
      link.setAttribute("href", new URL(link.href).hash || "#");
  return main.innerHTML;
}"""
# Put the joined chapters into the first page, then wait until every image has loaded.
JOIN_JS = """async (chapters) => {
  document.querySelector("main").innerHTML = chapters.map(
    (html) => `<section style="break-before: page">${html}</section>`).join("");
  await Promise.all(Array.from(document.images, (image) => image.decode().catch(() => null)));
}"""
# The headings the outline is built from, as the reader sees their text.
HEADINGS_JS = """() => Array.from(document.querySelectorAll("main h1, main h2"),
                                   (heading) => heading.textContent)"""
FOOTER = '<div style="font: 8px sans-serif; margin: auto"><span class="pageNumber"></span></div>'


def print_book(book: Path, root: Path = ROOT) -> Path:
    """Print every listed page of a rendered book, in order, into BOOK/agentbook.pdf."""
    pages = [Path(page).with_suffix(".html").as_posix()
             for page in listed_files(load_config(root))]
    output = book / PDF_NAME
    base = book.resolve().as_uri()
    with chromium_browser() as browser:
        tab = browser.new_page(viewport={"width": 1280, "height": 800})
        chapters = []
        for page in pages:
            open_page(tab, f"{base}/{page}")
            chapters.append(tab.evaluate(GATHER_JS))
        tab.goto(f"{base}/{pages[0]}", wait_until="load", timeout=PAGE_TIMEOUT * 1000)
        tab.evaluate(JOIN_JS, chapters)
        tab.emulate_media(media="print")
        headings = tab.evaluate(HEADINGS_JS)
        tab.pdf(path=output, format="A4", print_background=True, display_header_footer=True,
                outline=True, tagged=True,
                margin={"top": "18mm", "bottom": "18mm", "left": "16mm", "right": "16mm"},
                header_template="<span></span>", footer_template=FOOTER)
    mend_outline(output, headings)
    return output


def outline_items(outline: Any) -> Iterator[Any]:
    """Every bookmark of a PDF outline dictionary, depth first."""
    item = outline.get("/First")
    while item is not None:
        item = item.get_object()
        yield item
        yield from outline_items(item)
        item = item.get("/Next")


def mend_outline(pdf: Path, headings: list[str]) -> None:
    """Give each bookmark its heading's text.

    Chromium names a bookmark after the heading's printed lines, joined with no space, so a
    heading that wraps on the page reads "too large" as "toolarge" in the viewer's sidebar.
    Each bookmark whose text equals a heading's but for white space gets the heading's text.
    """
    from pypdf import PdfWriter
    from pypdf.generic import NameObject, TextStringObject

    def squeezed(text: str) -> str:
        return re.sub(r"\s+", "", text)

    by_letters = {squeezed(text): " ".join(text.split()) for text in headings}
    writer = PdfWriter(clone_from=pdf)
    for item in outline_items(writer.root_object.get("/Outlines", {})):
        title = by_letters.get(squeezed(str(item["/Title"])))
        if title is not None:
            item[NameObject("/Title")] = TextStringObject(title)
    writer.write(pdf)


def main(argv: list[str]) -> int:
    book = Path(argv[0]) if argv else ROOT / "_book"
    try:
        print(f"wrote {print_book(book)}")
    except FileNotFoundError as missing:
        print(f"{missing}; the PDF was not printed", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
