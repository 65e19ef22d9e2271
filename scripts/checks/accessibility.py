"""Run axe-core, the accessibility engine behind Lighthouse, on every page of a rendered book.

    python -m scripts.checks.accessibility [BOOK_DIR]

axe-core is pinned in live/package.json as a development dependency (`npm ci` in live/
installs it beside Pyodide). Each page is opened in Chromium at 1280 px, axe runs with its
default rules, and every violation of critical or serious impact is reported: the book
allows none. Prints one line per page and exits 1 if any page has one.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from scripts.checks.measure_pages import chromium_browser, html_pages, open_page

ROOT = Path(__file__).resolve().parents[2]
AXE = ROOT / "live" / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING = ("critical", "serious")
RUN_AXE = """() => axe.run(document).then((results) => results.violations.map((v) => ({
  rule: v.id, impact: v.impact, help: v.help,
  where: v.nodes.map((node) => node.target.join(" "))})))"""


def page_violations(tab: Any) -> list[dict[str, Any]]:
    """The critical and serious violations on the page open in ``tab``."""
    if not tab.evaluate("() => typeof axe !== 'undefined'"):
        tab.add_script_tag(path=str(AXE))
    return [found for found in tab.evaluate(RUN_AXE) if found["impact"] in BLOCKING]


def book_violations(book: Path, width: int = 1280) -> dict[str, list[dict[str, Any]]]:
    """Each page of the book, by its path under ``book``, with its blocking violations."""
    if not AXE.is_file():
        raise FileNotFoundError(f"{AXE} is missing: run `npm ci` in live/")
    found = {}
    with chromium_browser() as browser:
        tab = browser.new_page(viewport={"width": width, "height": 800})
        for page in html_pages(book):
            open_page(tab, page.resolve().as_uri())
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
    found = book_violations(Path(argv[0]) if argv else ROOT / "_book")
    print("\n".join(summary(found)))
    return 1 if any(found.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
