"""Measure the rendered book as a reader's browser lays it out, at 1280 and 390 px.

    python -m scripts.checks.measure_pages [BOOK_DIR] [--width W ...] [--height 800]
                                    [--screenshots DIR]

Opens every HTML page of BOOK_DIR (default `_book`) in Chromium, driven by the pinned
playwright, and reports per page: a page wider than the window, and every code block, code
span, output or image wider than its column (and how many monospace characters the column
holds); every diagram's smallest text, at least 12 px as drawn at a 1280 px window and as
opened full size at any width (a diagram scales to the column, and a tap opens it full
size); every diagram label's contrast against its fill, at least WCAG's 4.5:1; and every
diagram label whose text is taller than the box drawn for it, so that its last lines are
cut off. Exits 1 on any problem, 2 when Chromium is missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MIN_DIAGRAM_TEXT_PX = 12.0
FULL_WIDTH = 1280  # from this window width on, a diagram's text is read where it stands
MIN_CONTRAST = 4.5  # WCAG AA for normal text
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
CHROMIUM_FLAGS = ("--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--disable-background-networking", "--disable-component-update")
WIDTHS = (1280, 390)  # a laptop's window and a phone's screen, in CSS pixels
PAGE_TIMEOUT = 60.0  # seconds for one page to load and its diagrams to draw

MEASURE_JS = (Path(__file__).with_name("measure_pages.js")).read_text(encoding="utf-8")


@dataclass
class PageReport:
    """What one page measured: problems found, and the numbers worth printing."""

    page: str
    columns_chars: list[int] = field(default_factory=list)
    too_wide: list[str] = field(default_factory=list)
    diagrams: list[dict[str, Any]] = field(default_factory=list)
    labels: list[dict[str, Any]] = field(default_factory=list)  # every diagram label
    loaded: bool = False
    viewport: int = 0
    column: list[float] = field(default_factory=list)

    def problems(self) -> list[str]:
        if not self.loaded:
            return [f"{self.page}: no <main> element: the page did not load as a book page"]
        where = f"{self.page} at {self.viewport} px"
        found = [f"{where}: wider than its column: {what}" for what in self.too_wide]
        for diagram in self.diagrams:
            # On a narrower window it is read opened full size, at its drawn size.
            shown = (diagram["smallest_px"] if self.viewport >= FULL_WIDTH
                     else diagram["smallest_px"] / min(diagram["scale"], 1.0))
            if shown < MIN_DIAGRAM_TEXT_PX:
                found.append(f"{where}: diagram {diagram['id']} has text of {shown:.1f} px "
                             f"(\"{diagram['smallest_text']}\")")
            found += [f"{where}: diagram {diagram['id']} cuts off its label \"{text}\""
                      for text in diagram["cut_off"]]
            if diagram["scale"] < 0.99 and not diagram["opens_full_size"]:
                found.append(f"{where}: diagram {diagram['id']} is drawn at "
                             f"{diagram['scale']:.0%} and no tap opens it full size")
        found += [f"{where}: low contrast: {label['diagram']}: \"{label['text']}\" at "
                  f"{label['contrast']:.1f}:1"
                  for label in self.labels if label["contrast"] < MIN_CONTRAST]
        return found


def find_chromium() -> str | None:
    """The Chromium binary: $CHROMIUM if set, else the first known name on PATH."""
    return os.environ.get("CHROMIUM") or next(
        (path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


@contextmanager
def chromium_browser() -> Iterator[Any]:
    """The machine's own Chromium, headless, driven by playwright (which downloads none)."""
    from playwright.sync_api import sync_playwright

    chromium = find_chromium()
    if chromium is None:
        raise FileNotFoundError("Chromium not found (set $CHROMIUM or put it on PATH)")
    with sync_playwright() as playwright, playwright.chromium.launch(
            executable_path=chromium, args=CHROMIUM_FLAGS) as browser:
        yield browser


def open_page(page: Any, url: str) -> None:
    """Load a book page and wait until Quarto has drawn every diagram and loaded the fonts."""
    page.goto(url, wait_until="load", timeout=PAGE_TIMEOUT * 1000)
    page.wait_for_function("() => !document.querySelector('pre.mermaid-js')",
                           timeout=PAGE_TIMEOUT * 1000)
    page.evaluate("() => document.fonts.ready.then(() => true)")


def html_pages(book: Path) -> list[Path]:
    """Every page of the book, in a stable order (Quarto's site_libs hold none)."""
    return sorted(path for path in book.rglob("*.html")
                  if "site_libs" not in path.relative_to(book).parts)


def measure_book(book: Path, width: int = 1280, height: int = 800,
                 screenshots: Path | None = None) -> list[PageReport]:
    """Measure every page of a rendered book; needs Chromium (see find_chromium)."""
    pages = html_pages(book)
    if not pages:
        raise FileNotFoundError(f"no HTML pages under {book}")
    reports = []
    with chromium_browser() as browser:
        tab = browser.new_page(viewport={"width": width, "height": height})
        for page in pages:
            name = page.relative_to(book).as_posix()
            open_page(tab, page.resolve().as_uri())
            reports.append(PageReport(page=name, **tab.evaluate(MEASURE_JS)))
            if screenshots is not None:
                shot = f"{name.replace('/', '_').removesuffix('.html')}-{width}.png"
                tab.screenshot(path=screenshots / shot, full_page=True)
    return reports


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("book", nargs="?", default="_book", type=Path)
    parser.add_argument("--width", type=int, action="append",
                        help=f"window width in px; may repeat (default: {WIDTHS})")
    parser.add_argument("--height", type=int, default=800)
    parser.add_argument("--screenshots", type=Path, help="save a full-page PNG of each page")
    options = parser.parse_args(argv)
    if options.screenshots:
        options.screenshots.mkdir(parents=True, exist_ok=True)
    try:
        reports = [report for width in options.width or WIDTHS for report in
                   measure_book(options.book, width, options.height, options.screenshots)]
    except FileNotFoundError as missing:
        print(missing, file=sys.stderr)
        return 2
    problems = []
    for report in reports:
        if report.loaded:
            print(f"{report.page}: viewport {report.viewport} px, text column "
                  f"{report.column[1]:.0f} px; {len(report.columns_chars)} code/output blocks, "
                  f"the narrowest holds {min(report.columns_chars, default=0)} characters; "
                  f"{len(report.too_wide)} too wide")
        for diagram in report.diagrams:
            print(f"  diagram {diagram['id']}: scaled to {diagram['scale']:.0%}, "
                  f"smallest text {diagram['smallest_px']:.1f} px "
                  f"(\"{diagram['smallest_text']}\"), lowest contrast "
                  f"{diagram['lowest_contrast']:.1f}:1 at {diagram['box']}")
        problems += report.problems()
    for problem in problems:
        print("PROBLEM", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
