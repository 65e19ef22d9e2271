"""The book passes the validators its readers' tools apply.

- EPUBCheck, the EPUB reference validator that e-readers and stores rely on, on the EPUB the
  render writes (scripts/build/clean_epub.py removes what an EPUB may not hold); it runs
  where Debian's `epubcheck` and a Java runtime are installed, and skips elsewhere.
- The cleaning step itself, on a small EPUB made here, so it is checked without Quarto.
- axe-core, the accessibility engine behind Lighthouse, on every page at 1280 and 390 px: no
  critical or serious violation (scripts/checks/accessibility.py; Chromium and `npm ci` in
  live/ needed, else it skips); on Chapter 1 also after a cell has run and an answer has been
  checked, which adds outputs, feedback and changed buttons.
- The keyboard alone: an explorer step, and a live cell reached with Tab and run.
"""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from scripts.build import clean_epub
from scripts.checks.measure_pages import WIDTHS
from tests.test_live import context, served  # noqa: F401 - the book served, one Chromium

EPUBCHECK_JAR = Path("/usr/share/java/epubcheck.jar")  # where Debian's epubcheck puts it
PAGE = """<?xml version="1.0" encoding="UTF-8"?>
<html xmlns="http://www.w3.org/1999/xhtml"><head>
  <script src="https://cdn.example/require.min.js" crossorigin="anonymous"></script>
  <script type="application/javascript">define('jquery', [],function() {})</script>
</head><body><section id="{section}">
<div><style scoped>
    .dataframe tbody tr th:only-of-type { vertical-align: middle; }
</style><table class="dataframe"><tr><td>1</td></tr></table></div>
<div class="run-explorer"><script type="application/json">{"steps": []}</script>
<pre>the transcript</pre></div>
<div id="fig-a" class="quarto-figure" alt="bars"><img src="a.svg" alt="bars" /></div>
<p>See the <a href="references.qmd">References</a> and <a href="references.qmd#refs">one</a>.</p>
</section></body></html>
"""
GLYPHS = '<svg xmlns="http://www.w3.org/2000/svg"><path id="g-20" transform="scale(1)"/>' \
         '<path id="g-41" d="M 0 0 L 1 1"/></svg>'


def make_epub(path: Path, pages: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as book:
        book.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        for name, text in pages.items():
            book.writestr(name, text, compress_type=zipfile.ZIP_DEFLATED)


def test_cleaning_removes_scripts_and_scoped_styles_and_resolves_source_links(
        tmp_path: Path) -> None:
    path = tmp_path / "book.epub"
    make_epub(path, {"EPUB/text/ch001.xhtml": PAGE.replace("{section}", "sec-one"),
                     "EPUB/text/ch004.xhtml": PAGE.replace("{section}", "references"),
                     "EPUB/media/file2.svg": GLYPHS})
    clean_epub.clean_epub(path)
    with zipfile.ZipFile(path) as book:
        assert book.infolist()[0].filename == "mimetype"
        assert book.infolist()[0].compress_type == zipfile.ZIP_STORED
        page = book.read("EPUB/text/ch001.xhtml").decode()
        svg = book.read("EPUB/media/file2.svg").decode()
    assert "<script" not in page and "<style" not in page
    assert "<pre>the transcript</pre>" in page and "<td>1</td>" in page
    assert '<div id="fig-a" class="quarto-figure"><img src="a.svg" alt="bars" /></div>' in page
    assert 'href="ch004.xhtml"' in page and 'href="ch004.xhtml#refs"' in page
    assert '<path d="" id="g-20" transform="scale(1)"/>' in svg
    assert '<path id="g-41" d="M 0 0 L 1 1"/>' in svg


def test_cleaning_refuses_a_link_to_no_page_and_a_page_that_stays_broken(
        tmp_path: Path) -> None:
    path = tmp_path / "book.epub"
    make_epub(path, {"EPUB/text/ch001.xhtml": PAGE.replace("{section}", "sec-one")})
    with pytest.raises(ValueError, match="references.qmd"):
        clean_epub.clean_epub(path)
    make_epub(path, {"EPUB/text/ch001.xhtml": "<html><body><p>torn</body></html>"})
    before = path.read_bytes()
    with pytest.raises(ValueError, match="not well-formed"):
        clean_epub.clean_epub(path)
    assert path.read_bytes() == before  # nothing is written when a page stays unreadable


def test_epubcheck_finds_no_error_in_the_rendered_epub(rendered_book: tuple[Path, str]) -> None:
    book, _ = rendered_book
    epub = book / "agentbook.epub"
    if not epub.is_file():
        pytest.skip("no EPUB was rendered: Quarto needs Chromium for the EPUB's diagrams")
    java = shutil.which("java")
    if java is None or not EPUBCHECK_JAR.is_file():
        pytest.skip("EPUBCheck is not installed (apt-get install epubcheck)")
    checked = subprocess.run([java, "-jar", str(EPUBCHECK_JAR), str(epub)],
                             capture_output=True, text=True, timeout=300)
    report = checked.stdout + checked.stderr
    assert checked.returncode == 0, report
    assert "0 fatals / 0 errors / 0 warnings" in report, report


@pytest.mark.parametrize("width", WIDTHS)
def test_axe_finds_no_critical_or_serious_violation_on_any_page(
        rendered_book: tuple[Path, str], width: int) -> None:
    """At a laptop's width, and at a phone's, where tables scroll and the toolbar is icons."""
    from scripts.checks import accessibility

    # The full suite renders with live/'s npm packages installed (tests/conftest.py), so
    # axe-core is there unless that failed.
    assert accessibility.AXE.is_file(), "axe-core is not installed: run `npm ci` in live/"
    book, _ = rendered_book
    found = accessibility.book_violations(book, width)
    assert len(found) >= 7 and not any(found.values()), "\n".join(
        accessibility.summary(found))


MAX_TABS = 400  # key presses allowed to reach a control from the top of a page


def tab_to(tab: Any, wanted: str) -> int:
    """Press Tab from the top of the page until ``wanted`` (a JS test on the focused element)
    holds; return how many presses it took, or fail."""
    for presses in range(1, MAX_TABS + 1):
        tab.keyboard.press("Tab")
        if tab.evaluate(f"() => {{ const e = document.activeElement; return {wanted}; }}"):
            return presses
    raise AssertionError(f"{MAX_TABS} presses of Tab never reached {wanted}")


def test_an_explorer_step_is_reached_and_taken_by_keyboard_alone(
        rendered_book: tuple[Path, str]) -> None:
    from scripts.checks import measure_pages

    if measure_pages.find_chromium() is None:
        pytest.skip("Chromium is not on PATH (or $CHROMIUM)")
    book, _ = rendered_book
    with measure_pages.chromium_browser() as browser:
        tab = browser.new_page(viewport={"width": 1280, "height": 800})
        measure_pages.open_page(tab, (book / "chapters" / "a2_run_explorer.html").as_uri())
        tab_to(tab, "e.getAttribute('aria-label') === 'Next step'")
        panel = "() => document.activeElement.closest('.rx-panel').dataset.rxStep"
        assert tab.evaluate(panel) == "0"
        tab.keyboard.press("Enter")
        assert tab.evaluate(panel) == "1"
        tab.keyboard.press("ArrowRight")  # the panel's own keys, from its button
        assert tab.evaluate(panel) == "2"


def test_a_live_cell_is_run_by_keyboard_alone_and_axe_still_passes_after(
        context: Any, served: str) -> None:  # noqa: F811
    from scripts.checks import accessibility

    tab = context.new_page()
    tab.goto(f"{served}chapters/01_anatomy.html")
    tab.wait_for_selector(".live-toolbar")
    tab_to(tab, "(e.getAttribute('aria-label') || '').startsWith('Run this cell')")
    cell = tab.evaluate("() => document.activeElement.closest('[data-cell-id]').dataset.cellId")
    tab.keyboard.press("Enter")
    output = tab.locator(f'div[data-cell-id="{cell}"] [data-live-output]')
    output.and_(tab.locator("[data-status]")).wait_for(
        state="attached", timeout=accessibility.RUN_TIMEOUT)
    assert output.get_attribute("data-status") == "ok", output.inner_text()
    assert output.is_visible() and output.inner_text().strip()
    # The page as it is after a run and a check: outputs, feedback, changed buttons.
    accessibility.run_a_cell_and_a_check(tab)
    if accessibility.AXE.is_file():
        found = accessibility.page_violations(tab)
        assert not found, "\n".join(accessibility.summary({"01_anatomy.html": found}))
    tab.close()
