"""Keep the rendered book free of network requests: Quarto's post-render step.

    python scripts/build/offline_pages.py [BOOK_DIR]

Quarto adds require.js and jQuery, loaded from a CDN, to the head of every page whose notebook
has an HTML or JavaScript output, followed by an inline `define('jquery', ...)` that needs
require.js. It does so because such outputs might be widgets that expect those libraries
(`src/core/jupyter/widgets.ts` in Quarto's source), and no option turns it off. The book's
HTML outputs, the pattern table and the run explorer, need neither library. Opened offline,
such a page would try both downloads and then fail on the `define` call.

`_quarto.yml` runs this script after every render (`project: post-render`). It removes those
three tags, and nothing else, from every page under BOOK_DIR (default: the folder Quarto names
in $QUARTO_PROJECT_OUTPUT_DIR, else `_book`). It needs only the standard library, because
Quarto runs it with whichever Python it finds on PATH.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

DEFAULT_BOOK_DIR = "_book"
# The tags exactly as Quarto 1.7 writes them, each with the line break after it.
WIDGET_TAGS = re.compile(
    r"[ \t]*<script\b[^>]*\bsrc=\"https?://[^\"]*/(?:require\.js/[\d.]+/require|"
    r"jquery/[\d.]+/jquery)\.min\.js\"[^>]*>\s*</script>[ \t]*\n?"
    r"|[ \t]*<script type=\"application/javascript\">\s*define\('jquery', \[\],\s*"
    r"function\(\) \{return window\.jQuery;\}\)\s*</script>[ \t]*\n?"
)


def without_widget_tags(page: str) -> tuple[str, int]:
    """The page without Quarto's require.js and jQuery tags, and how many were removed."""
    return WIDGET_TAGS.subn("", page)


def clean_book(book: Path) -> list[str]:
    """Remove the tags from every page under `book`; say which pages changed and how."""
    if not book.is_dir():
        raise SystemExit(f"{book} is not a folder: render the book first")
    changed = []
    for page in sorted(book.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        cleaned, removed = without_widget_tags(text)
        if removed:
            page.write_text(cleaned, encoding="utf-8")
            changed.append(f"{page.relative_to(book).as_posix()}: removed {removed} "
                           "require.js/jQuery tags")
    return changed


def main(argv: list[str]) -> int:
    book = Path(argv[0] if argv else os.environ.get("QUARTO_PROJECT_OUTPUT_DIR")
                or DEFAULT_BOOK_DIR)
    for line in clean_book(book):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
