"""Keep the rendered book free of network requests: Quarto's post-render step.

    python scripts/build/offline_pages.py [BOOK_DIR]

Quarto adds require.js and jQuery from a CDN, and an inline `define('jquery', ...)`, to every
page whose notebook has an HTML or JavaScript output, in case it is a widget; no option turns
that off, and the book's HTML outputs need neither. This removes those three tags, and nothing
else, from every page under BOOK_DIR (default: $QUARTO_PROJECT_OUTPUT_DIR, else `_book`). It
needs only the standard library: Quarto runs it with whichever Python is on PATH.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

# The tags exactly as Quarto 1.7 writes them, each with the line break after it.
WIDGET_TAGS = re.compile(
    r"[ \t]*<script\b[^>]*\bsrc=\"https?://[^\"]*/(?:require\.js/[\d.]+/require|"
    r"jquery/[\d.]+/jquery)\.min\.js\"[^>]*>\s*</script>[ \t]*\n?"
    r"|[ \t]*<script type=\"application/javascript\">\s*define\('jquery', \[\],\s*"
    r"function\(\) \{return window\.jQuery;\}\)\s*</script>[ \t]*\n?"
)


def clean_book(book: Path) -> list[str]:
    """Remove the tags from every page under `book`; say which pages changed and how."""
    if not book.is_dir():
        raise SystemExit(f"{book} is not a folder: render the book first")
    changed = []
    for page in sorted(book.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        cleaned, removed = WIDGET_TAGS.subn("", text)
        if removed:
            page.write_text(cleaned, encoding="utf-8")
            changed.append(f"{page.relative_to(book).as_posix()}: removed {removed} "
                           "require.js/jQuery tags")
    return changed


def main(argv: list[str]) -> int:
    book = Path(argv[0] if argv else os.environ.get("QUARTO_PROJECT_OUTPUT_DIR")
                or "_book")
    for line in clean_book(book):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
