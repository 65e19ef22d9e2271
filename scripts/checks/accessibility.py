"""Run axe-core, the accessibility engine behind Lighthouse, on every page of a rendered book.

    python -m scripts.checks.accessibility [--after-run] [--width W] [BOOK_DIR]

axe-core is pinned in live/package.json as a development dependency (`npm ci` in live/
installs it beside Pyodide). Each page is opened in Chromium at 1280 px (or the --width
given: 390 is a phone's, where the live toolbar shows icons and wide tables scroll), axe
runs with its default rules, and every violation of critical or serious impact is reported:
the book allows none. Prints one line per page and exits 1 if any page has one.

The book is served over HTTP, as a reader's browser gets it, so that each page has its live
toolbar and Run buttons. With --after-run, on a page with live cells the first cell is run
and the first exercise checked before axe looks: their outputs, feedback and changed buttons
are part of the page a reader meets too.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from scripts.checks.measure_pages import chromium_browser, html_pages, open_page

ROOT = Path(__file__).resolve().parents[2]
AXE = ROOT / "live" / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING = ("critical", "serious")
RUN_TIMEOUT = 180_000  # ms: the page's Python loads first, on two shared cores
# Only violations are gathered in full (`resultTypes`), which spares axe a quarter of its work
# on a long chapter.
RUN_AXE = """() => axe.run(document, { resultTypes: ["violations"] }).then((results) =>
  results.violations.map((v) => ({
  rule: v.id, impact: v.impact, help: v.help,
  where: v.nodes.map((node) => node.target.join(" "))})))"""


def page_violations(tab: Any) -> list[dict[str, Any]]:
    """The critical and serious violations on the page open in ``tab``."""
    if not tab.evaluate("() => typeof axe !== 'undefined'"):
        tab.add_script_tag(path=str(AXE))
    return [found for found in tab.evaluate(RUN_AXE) if found["impact"] in BLOCKING]


def run_a_cell_and_a_check(tab: Any) -> None:
    """On a page with live cells, run its first cell and check its first exercise, and wait
    for both to finish (a page without them is left as it is)."""
    cell = tab.locator("div.cell[data-cell-id]:not([data-live='static'])").first
    if cell.count():
        tab.wait_for_selector(".live-toolbar")  # live.js has given the cells their buttons
        cell.get_by_role("button", name="Run this cell", exact=False).click()
        cell.locator("[data-live-output][data-status]").wait_for(
            state="attached", timeout=RUN_TIMEOUT)
    # The first question the page can check (one that checks only in Jupyter has no Check).
    block = tab.locator("[data-exercise]:has(button[aria-label^='Check '])").first
    if block.count():
        block.get_by_role("button", name="Check ", exact=False).click()
        block.locator("[data-feedback][data-status]").wait_for(
            state="attached", timeout=RUN_TIMEOUT)


@contextmanager
def serving(book: Path) -> Iterator[str]:
    """The book over HTTP from this machine, as `python3 -m http.server` serves it."""
    handler = functools.partial(QuietHandler, directory=str(book))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def book_violations(book: Path, width: int = 1280,
                    after_run: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Each page of the book, by its path under ``book``, with its blocking violations;
    ``after_run``: looked at after running a cell and a check (see run_a_cell_and_a_check)."""
    if not AXE.is_file():
        raise FileNotFoundError(f"{AXE} is missing: run `npm ci` in live/")
    found = {}
    with chromium_browser() as browser, serving(book) as served:
        tab = browser.new_page(viewport={"width": width, "height": 800})
        for page in html_pages(book):
            open_page(tab, served + page.relative_to(book).as_posix())
            if tab.locator("div.cell[data-cell-id]").count():
                tab.wait_for_selector(".live-toolbar")  # the page as a reader's browser has it
            if after_run:
                run_a_cell_and_a_check(tab)
            found[page.relative_to(book).as_posix()] = page_violations(tab)
    return found


def summary(found: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One line per page: its critical and serious counts, then each rule that failed."""
    lines = []
    for page, violations in found.items():
        counts = {impact: sum(len(v["where"]) for v in violations if v["impact"] == impact)
                  for impact in BLOCKING}
        lines.append(f"{page}: {counts['critical']} critical, {counts['serious']} serious")
        lines += [f"  {v['impact']} {v['rule']} ({v['help']}): {', '.join(v['where'][:3])}"
                  for v in violations]
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("book", nargs="?", default=ROOT / "_book", type=Path)
    parser.add_argument("--after-run", action="store_true")
    parser.add_argument("--width", type=int, default=1280)
    options = parser.parse_args(argv)
    found = book_violations(options.book, options.width, options.after_run)
    print("\n".join(summary(found)))
    return 1 if any(found.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
