"""The book as readers see it: every line fits the text column, and the rendered book is clean.

The text column of the rendered book holds 79 characters of code or output at a 1280 px
window (scripts/checks/measure_pages.py measures it in Chromium), so:

- the chapters' source lines are held to 79 by ruff (chapters/ruff.toml), and
- every line the book prints in a monospace block (stored outputs, and code fenced in the
  prose) is held to 79 here, where ruff cannot look.

In the full suite (`python3 dev.py test --full`), the book is rendered into a temporary
folder and checked: no warning, every page that _quarto.yml lists, no unresolved
cross-reference, every figure file, the equations as MathML, and no page or stylesheet that
loads a script or stylesheet from the network. Every page is measured in Chromium at 1280 px
and at 390 px: nothing wider than its column, diagram text of at least 12 px, no diagram
label cut off by its box, labels readable against their fills; the EPUB opens with ebooklib
and holds every chapter, caption and citation, and the printed PDF holds them too with no
text in its margins, tagged, with a bookmark for every chapter and numbered section. The
quick suite skips those tests, and so does the full suite where poppler is missing, saying
why.
"""

from __future__ import annotations

import json
from html import unescape
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from scripts.build import live_book, print_book
from scripts.checks import measure_pages

ROOT = Path(__file__).resolve().parent.parent
MAX_LINE = 79  # characters of code or output the text column holds at 1280 px
MAX_LINE_IN_LIST = 77  # a block inside a list item is indented by the item's marker
# What the book shows of an output: the first of these it finds (Quarto's order), so a
# text/plain beside an HTML table or an SVG figure is not on the page.
RICHER_THAN_TEXT = ("text/html", "image/svg+xml", "image/png", "text/markdown", "text/latex")
FENCE = re.compile(r"^( *)(`{3,}|~{3,})(.*)$")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
WARNING = re.compile(r"\bWARN(?:ING)?\b")
CHROMIUM_MISSING = "Chromium is not on PATH (or $CHROMIUM), so pages cannot be measured"


# --- The lines the book shows, without Quarto -------------------------------------------------

def fenced_blocks(markdown: str) -> Iterator[tuple[int, list[str]]]:
    """Every fenced code block of a markdown text, as its indentation and its lines with that
    indentation removed (a ```{mermaid} diagram is drawn, not shown as text, so it is left out).
    """
    fence, indent, lines, drawn = "", 0, [], False
    for line in markdown.splitlines():
        opened = FENCE.match(line)
        if not fence:
            if opened:
                fence, indent, lines = opened.group(2), len(opened.group(1)), []
                drawn = "mermaid" in opened.group(3)
        elif line.strip().startswith(fence) and not line.strip().strip(fence[0]):
            fence = ""
            if not drawn:
                yield indent, lines
        else:
            lines.append(line[indent:] if line[:indent].isspace() else line.lstrip())


def long_fenced_lines(markdown: str, where: str) -> list[str]:
    """Every line of a fenced block longer than the column holds."""
    return [f"{where}: fenced line of {len(line)} characters: {line[:50]}"
            for indent, lines in fenced_blocks(markdown)
            for line in lines if len(line) > (MAX_LINE_IN_LIST if indent else MAX_LINE)]


def shown_output_text(output: dict[str, object]) -> str:
    """The text a stored output shows in the book, or "" when it shows something richer."""
    if output.get("output_type") == "stream":
        return "".join(output.get("text", ""))  # type: ignore[arg-type]
    data = output.get("data", {})
    assert isinstance(data, dict)
    if any(kind in data for kind in RICHER_THAN_TEXT):
        return ""
    if output.get("output_type") == "error":
        return "\n".join(output.get("traceback", []))  # type: ignore[arg-type]
    return "".join(data.get("text/plain", ""))


def long_lines_in_notebook(path: Path, limit: int = MAX_LINE) -> list[str]:
    """Every printed output line and every fenced line of prose longer than `limit`.

    Code cells' own source is ruff's to check (chapters/ruff.toml).
    """
    found = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        where = f"{path.name} cell {cell.get('id', '?')}"
        if cell["cell_type"] == "markdown":
            found += long_fenced_lines("".join(cell["source"]), where)
            continue
        lines = [line for output in cell.get("outputs", [])
                 for line in ANSI.sub("", shown_output_text(output)).splitlines()]
        found += [f"{where}: output line of {len(line)} characters: {line[:50]}"
                  for line in lines if len(line) > limit]
    return found


def long_lines_in_markdown(path: Path) -> list[str]:
    return long_fenced_lines(path.read_text(encoding="utf-8"), path.name)


def book_files(root: Path) -> list[Path]:
    """The pages _quarto.yml lists, in its order."""
    book = yaml.safe_load((root / "_quarto.yml").read_text(encoding="utf-8"))["book"]
    listed = book.get("chapters", []) + book.get("appendices", [])
    return [root / entry for entry in listed if isinstance(entry, str)]


def test_every_printed_and_fenced_line_fits_the_column() -> None:
    problems = []
    for page in book_files(ROOT):
        if page.suffix == ".ipynb":
            problems += long_lines_in_notebook(page)
        else:
            problems += long_lines_in_markdown(page)
    assert not problems, "\n".join(problems)


def test_ruff_holds_the_chapters_to_the_column() -> None:
    settings = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--show-settings",
         str(ROOT / "chapters" / "01_anatomy.ipynb")],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout
    assert re.search(rf"^linter\.line_length\s*=\s*{MAX_LINE}$", settings, re.MULTILINE)


def notebook(tmp_path: Path, cells: list[dict[str, object]]) -> Path:
    path = tmp_path / "one.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}), encoding="utf-8")
    return path


def code_cell(*outputs: dict[str, object]) -> dict[str, object]:
    return {"cell_type": "code", "id": "c1", "source": ["print(x)"], "metadata": {},
            "outputs": list(outputs), "execution_count": 1}


def test_the_line_check_finds_long_printed_lines_only_where_shown(tmp_path: Path) -> None:
    long, short = "x" * (MAX_LINE + 1), "x" * MAX_LINE
    shown = notebook(tmp_path, [code_cell(
        {"output_type": "stream", "name": "stdout", "text": [short + "\n", long + "\n"]},
        {"output_type": "execute_result", "data": {"text/plain": ["\x1b[1m" + short]},
         "metadata": {}, "execution_count": 1},
    )])
    assert long_lines_in_notebook(shown) == [
        f"one.ipynb cell c1: output line of {MAX_LINE + 1} characters: {'x' * 50}"]
    # Beside an HTML table the text/plain is not on the page, so its width does not matter.
    hidden = notebook(tmp_path, [code_cell(
        {"output_type": "display_data", "metadata": {},
         "data": {"text/html": ["<table></table>"], "text/plain": [long]}})])
    assert long_lines_in_notebook(hidden) == []


def test_the_line_check_reads_fenced_prose_but_not_diagrams(tmp_path: Path) -> None:
    long = "y" * (MAX_LINE + 1)
    prose = f"A {long} sentence is wrapped.\n\n```sh\n{long}\n```\n\n```{{mermaid}}\n{long}\n```\n"
    page = notebook(tmp_path, [{"cell_type": "markdown", "id": "m1", "metadata": {},
                                "source": [prose]}])
    assert long_lines_in_notebook(page) == [
        f"one.ipynb cell m1: fenced line of {MAX_LINE + 1} characters: {'y' * 50}"]
    qmd = tmp_path / "page.qmd"
    qmd.write_text(prose, encoding="utf-8")
    assert len(long_lines_in_markdown(qmd)) == 1


def test_a_block_in_a_list_is_held_to_the_narrower_width(tmp_path: Path) -> None:
    fits, too_long = "z" * MAX_LINE_IN_LIST, "z" * (MAX_LINE_IN_LIST + 1)
    listed = f"- run:\n\n  ```sh\n  {fits}\n  {too_long}\n  ```\n"
    assert long_fenced_lines(listed, "page") == [
        f"page: fenced line of {MAX_LINE_IN_LIST + 1} characters: {'z' * 50}"]


# --- The rendered book (needs Quarto; the measurement needs Chromium too) ---------------------


@pytest.fixture(scope="module")
def rendered(rendered_book: tuple[Path, str]) -> tuple[Path, str]:
    """The book rendered from a copy of the sources (tests/conftest.py, once per run)."""
    return rendered_book


def html_for(page: Path) -> Path:
    return page.relative_to(ROOT).with_suffix(".html")


def test_the_render_has_no_warning(rendered: tuple[Path, str]) -> None:
    _, log = rendered
    assert not [line for line in log.splitlines() if WARNING.search(line)], log


def test_every_listed_page_is_rendered(rendered: tuple[Path, str]) -> None:
    book, _ = rendered
    missing = [str(html_for(page)) for page in book_files(ROOT)
               if not (book / html_for(page)).is_file()]
    assert not missing


def test_no_reference_is_left_unresolved(rendered: tuple[Path, str]) -> None:
    book, _ = rendered
    unresolved = [f"{page.name}: {match}" for page in measure_pages.html_pages(book)
                  for match in re.findall(r"\?@[\w-]+", page.read_text(encoding="utf-8"))]
    assert not unresolved


def test_every_image_file_is_there(rendered: tuple[Path, str]) -> None:
    book, _ = rendered
    missing, seen = [], 0
    for page in measure_pages.html_pages(book):
        for source in re.findall(r"<img\b[^>]*\bsrc=\"([^\"]+)\"", page.read_text("utf-8")):
            if re.match(r"^(?:[a-z]+:|//)", source):
                continue  # a badge on the web, not one of the book's figures
            seen += 1
            if not (page.parent / source).is_file():
                missing.append(f"{page.name}: {source}")
    assert seen and not missing


def test_a_name_in_a_table_breaks_between_its_words_in_html_only(
        rendered: tuple[Path, str]) -> None:
    """filters/table-code-breaks.lua: a break allowed after each underscore and dot of a
    table's code, none in running text, and none in the EPUB, whose XHTML it would break."""
    book, _ = rendered
    page = (book / "chapters" / "02_durable.html").read_text(encoding="utf-8")
    table = page[page.index('id="tbl-durable-attacks"'):]
    table = table[:table.index("</table>")]
    name = "test_a_paused_run_resumes_only_once"
    assert f"<code>{name.replace('_', '_<wbr>')}</code>" in table
    assert "<wbr>" not in re.sub(r"<table\b.*?</table>", "", page, flags=re.DOTALL)
    with zipfile.ZipFile(book / "agentbook.epub") as epub:
        assert not any("<wbr" in epub.read(item).decode("utf-8", "replace")
                       for item in epub.namelist() if item.endswith(".xhtml"))


def test_equations_are_mathml_and_need_no_network(rendered: tuple[Path, str]) -> None:
    book, _ = rendered
    pages = {page: page.read_text(encoding="utf-8") for page in measure_pages.html_pages(book)}
    # No math library is loaded (a drawn diagram's stylesheet may still name .katex).
    loads_math = re.compile(r"<(?:script|link)\b[^>]*(?:mathjax|katex)", re.IGNORECASE)
    assert not [page.name for page, html in pages.items() if loads_math.search(html)]
    equations = [html for html in pages.values() if 'id="eq-' in html]
    assert equations and all(re.search(r'<span id="eq-[^"]+"><math display="block"', html)
                             for html in equations)


# A script or stylesheet from the network, in a page or pulled in by a stylesheet.
EXTERNAL_IN_PAGE = re.compile(
    r"<script\b[^>]*\bsrc=[\"']?(?:https?:)?//[^\"'\s>]+"
    r"|<link\b(?=[^>]*\brel=[\"']?stylesheet)[^>]*\bhref=[\"']?(?:https?:)?//[^\"'\s>]+"
    r"|@import\s+(?:url\()?[\"']?(?:https?:)?//[^\"')\s;]+", re.IGNORECASE)
EXTERNAL_IN_STYLESHEET = re.compile(
    r"@import\s+(?:url\()?[\"']?(?:https?:)?//[^\"')\s;]+"
    r"|url\(\s*[\"']?(?:https?:)?//[^\"')\s]+", re.IGNORECASE)


def network_references(book: Path) -> list[str]:
    """Every script or stylesheet a rendered page, or one of its stylesheets, would fetch
    from the network (a link or an image is not fetched to show the page, so is allowed)."""
    found = [f"{page.relative_to(book).as_posix()}: {match}"
             for page in sorted(book.rglob("*.html"))
             for match in EXTERNAL_IN_PAGE.findall(page.read_text(encoding="utf-8"))]
    found += [f"{sheet.relative_to(book).as_posix()}: {match}"
              for sheet in sorted(book.rglob("*.css"))
              for match in EXTERNAL_IN_STYLESHEET.findall(sheet.read_text(encoding="utf-8"))]
    return found


def test_the_network_check_finds_external_scripts_and_stylesheets(tmp_path: Path) -> None:
    (tmp_path / "page.html").write_text(
        '<script src="https://cdn.example/lib.js"></script><script src="local.js"></script>'
        '<link rel="stylesheet" href="//cdn.example/a.css"><link rel="icon" href="https://x/i">'
        '<a href="https://example.org/">a link</a><img src="https://example.org/b.svg">',
        encoding="utf-8")
    (tmp_path / "site.css").write_text(
        '@import url("https://fonts.example/css?f=1");\nbody{background:url(img.png)}',
        encoding="utf-8")
    assert network_references(tmp_path) == [
        'page.html: <script src="https://cdn.example/lib.js',
        'page.html: <link rel="stylesheet" href="//cdn.example/a.css',
        'site.css: @import url("https://fonts.example/css?f=1']


def test_the_post_render_step_removes_quartos_widget_and_diagram_scripts_and_nothing_else(
        tmp_path: Path) -> None:
    # The three tags as Quarto 1.7.32 writes them into a page with an HTML output.
    page = (
        "<head>\n"
        '<script src="https://cdnjs.cloudflare.com/ajax/libs/jquery/3.5.1/jquery.min.js" '
        'integrity="sha512-x" crossorigin="anonymous"></script><script src="../a.js"></script>\n'
        "<title>t</title>\n"
        '<script src="https://cdnjs.cloudflare.com/ajax/libs/require.js/2.3.6/require.min.js" '
        'integrity="sha512-y" crossorigin="anonymous"></script>\n'
        '<script src="../b.js"></script>\n'
        "<script type=\"application/javascript\">define('jquery', [],function() "
        "{return window.jQuery;})</script>\n"
        '<script src="../site_libs/quarto-diagram/mermaid-postprocess-shim.js"></script>\n'
        "</head>\n")
    (tmp_path / "chapters").mkdir()
    (tmp_path / "chapters" / "one.html").write_text(page, encoding="utf-8")
    (tmp_path / "two.html").write_text("<p>nothing to remove</p>\n", encoding="utf-8")
    assert live_book.clean_book(tmp_path) == [
        "chapters/one.html: removed 3 require.js/jQuery tags",
        "chapters/one.html: removed Quarto's diagram post-processing script"]
    assert (tmp_path / "chapters" / "one.html").read_text(encoding="utf-8") == (
        '<head>\n<script src="../a.js"></script>\n<title>t</title>\n'
        '<script src="../b.js"></script>\n</head>\n')
    assert network_references(tmp_path) == []
    assert live_book.clean_book(tmp_path) == []  # a second run changes nothing


def test_quarto_runs_the_post_render_steps() -> None:
    config = yaml.safe_load((ROOT / "_quarto.yml").read_text(encoding="utf-8"))
    steps = config["project"]["post-render"]
    assert steps == ["scripts/build/live_book.py", "scripts/build/clean_epub.py"]
    assert all((ROOT / step).is_file() for step in steps)


def test_a_drawn_diagram_is_sized_to_the_column_and_keeps_its_classes() -> None:
    tag = ('<svg aria-roledescription="flowchart-v2" viewbox="0 0 781.19 396.4" '
           'class="flowchart" width="672" id="mermaid-figure-3" height="480">')
    scaled = live_book.scale_diagram(tag)
    assert scaled == ('<svg class="diagram flowchart" style="max-width: 781px" '
                      'aria-roledescription="flowchart-v2" viewbox="0 0 781.19 396.4" '
                      'id="mermaid-figure-3">')
    assert live_book.scale_diagram(scaled) == scaled  # a second run changes nothing


def test_a_diagram_label_is_one_line_again_so_its_line_breaks_are_not_drawn() -> None:
    # A label as Quarto 1.7.32 writes it: each tag on a line of its own, which a label that
    # wraps (white-space: break-spaces) would draw as empty lines.
    label = ('<foreignobject height="72" width="200">\n<div style="white-space: break-spaces;">'
             '\n<span class="nodeLabel">\n<p>\n<b>Environment</b><br>order table, payments,'
             '\neffect log\n</p>\n</span>\n</div>\n</foreignobject>')
    page = f"<p>Text\nabout it</p><svg>{label}</svg>"
    assert live_book.tidy_labels(page) == (
        '<p>Text\nabout it</p><svg><foreignobject height="72" width="200"><div style='
        '"white-space: break-spaces;"><span class="nodeLabel"><p><b>Environment</b><br>order '
        'table, payments, effect log</p></span></div></foreignobject></svg>')
    assert live_book.tidy_labels(live_book.tidy_labels(page)) == live_book.tidy_labels(page)


def test_diagrams_are_drawn_at_build_time_and_no_page_loads_mermaid(
        rendered: tuple[Path, str]) -> None:
    config = yaml.safe_load((ROOT / "_quarto.yml").read_text(encoding="utf-8"))
    assert config["format"]["html"]["mermaid-format"] == "svg"
    book, _ = rendered
    pages = [page.read_text(encoding="utf-8") for page in measure_pages.html_pages(book)]
    assert sum(page.count('<svg class="diagram') for page in pages) >= 3
    assert not [page for page in pages if "mermaid.min.js" in page]


def test_no_page_loads_a_script_or_stylesheet_from_the_network(
        rendered: tuple[Path, str]) -> None:
    book, _ = rendered
    assert network_references(book) == []


@pytest.mark.parametrize("width", measure_pages.WIDTHS)
def test_every_page_fits_its_column(rendered: tuple[Path, str], width: int) -> None:
    """At a laptop's 1280 px and a phone's 390 px."""
    if measure_pages.find_chromium() is None:
        pytest.skip(CHROMIUM_MISSING)
    book, _ = rendered
    reports = measure_pages.measure_book(book, width=width, height=800)
    assert {report.page for report in reports} >= {str(html_for(p)) for p in book_files(ROOT)}
    # Chromium lays out what it loads: every chapter has code blocks and every diagram text.
    assert all(report.columns_chars for report in reports if report.page.startswith("chap"))
    assert sum(len(report.diagrams) for report in reports) >= 1
    problems = [problem for report in reports for problem in report.problems()]
    assert not problems, "\n".join(problems)


def page(tmp_path: Path, body: str) -> Path:
    """A one-page book whose text column is 400 px wide."""
    book = tmp_path / "book"
    book.mkdir()
    (book / "page.html").write_text(
        f"<!doctype html><html><body><main style='width: 400px'>{body}</main></body></html>",
        encoding="utf-8")
    return book


def test_the_measurement_passes_a_page_that_fits(tmp_path: Path, full_suite: None) -> None:
    if measure_pages.find_chromium() is None:
        pytest.skip(CHROMIUM_MISSING)
    # Code in a table that scrolls in its own box (book.scss) is read by scrolling the table.
    book = page(tmp_path, "<pre>short</pre><svg class='diagram' id='d' viewBox='0 0 200 50'"
                          " width='200'><text x='5' y='30' font-size='16'>big</text>"
                          "<foreignObject width='150' height='40'><div style='font-size: "
                          "16px'>fits its box</div></foreignObject></svg>"
                          "<table style='display: block; overflow-x: auto'><tr><td><code "
                          f"style='white-space: pre'>{'w' * 80}</code></td></tr></table>")
    [report] = measure_pages.measure_book(book)
    assert report.problems() == []
    assert report.diagrams[0]["smallest_px"] == 16


def test_the_measurement_finds_wide_blocks_small_text_and_low_contrast(
        tmp_path: Path, full_suite: None) -> None:
    if measure_pages.find_chromium() is None:
        pytest.skip(CHROMIUM_MISSING)
    # A 1000-unit diagram squeezed into 400 px draws 16-unit text at 6.4 px, and nothing
    # opens it full size.
    book = page(tmp_path, f"<pre>{'x' * 200}</pre><p><code>{'y' * 80}</code></p>"
                          "<svg class='diagram' id='d' "
                          "viewBox='0 0 1000 100' style='width: 400px'>"
                          "<rect width='1000' height='100' fill='#333'/>"
                          "<text x='10' y='50' font-size='16' fill='#444'>dim</text>"
                          "<foreignObject width='300' height='30'><div style='font-size: 20px;"
                          " white-space: pre; color: #fff'>\nlost\nwords</div></foreignObject>"
                          "</svg>")
    [report] = measure_pages.measure_book(book)
    problems = report.problems()
    assert len(problems) == 7, problems
    assert "code line of 200 characters" in problems[0]
    assert "inline code to " in problems[1] and "yyyy" in problems[1]
    assert "the page is " in problems[2]  # the unwrapped code pushes it wider
    assert 'text of 6.4 px ("dim")' in problems[3]
    assert 'cuts off its label "lost words"' in problems[4]
    assert "drawn at 40% and no tap opens it full size" in problems[5]
    assert '"dim" at 1.' in problems[6]


def test_on_a_phone_the_measurement_finds_a_page_wider_than_the_window(
        tmp_path: Path, full_suite: None) -> None:
    if measure_pages.find_chromium() is None:
        pytest.skip(CHROMIUM_MISSING)
    # A diagram that opens full size may shrink on a phone: its text is read opened.
    book = page(tmp_path, "<svg class='diagram diagram-open' tabindex='0' id='d' "
                          "viewBox='0 0 1000 100' style='width: 100%'>"
                          "<text x='10' y='50' font-size='16'>read opened</text></svg>"
                          f"<p>A sentence with <code>{'z' * 70}</code> in it.</p>")
    [report] = measure_pages.measure_book(book, width=390)
    problems = report.problems()
    assert len(problems) == 2, problems
    assert "inline code to " in problems[0]
    assert "the page is " in problems[1] and "wide in a window of 390 px" in problems[1]


# --- The book to take away: EPUB and PDF --------------------------------------------------------

def page_titles(book: Path) -> list[str]:
    """The title of every listed page, as the rendered HTML shows it."""
    titles = []
    for page in book_files(ROOT):
        html = (book / html_for(page)).read_text(encoding="utf-8")
        title = re.search(r'<h1 class="title">(.*?)</h1>', html, re.DOTALL)
        assert title, page
        words = re.search(r'class="chapter-title">(.*?)</span>', title.group(1))
        text = re.sub(r"<[^>]+>", " ", (words or title).group(1))
        titles.append(" ".join(unescape(text).split()))
    return titles


def captions(text: str) -> list[str]:
    """The figure and table numbers a text shows ("Figure 1.3")."""
    found = re.findall(r"(?:Figure|Table)\s[\dA-Z]+\.\d+", unescape(text))
    return sorted({" ".join(number.split()) for number in found})


def test_the_epub_holds_every_chapter_figure_and_citation(rendered: tuple[Path, str]) -> None:
    book, _ = rendered
    if not (book / "agentbook.epub").is_file():
        pytest.skip(CHROMIUM_MISSING + ", and Quarto needs it for the EPUB's diagrams")
    from ebooklib import ITEM_DOCUMENT, ITEM_IMAGE, epub

    read = epub.read_epub(str(book / "agentbook.epub"))
    documents = [item.get_content().decode("utf-8") for item in read.get_items_of_type(
        ITEM_DOCUMENT)]
    text = re.sub(r"<[^>]+>", " ", "\n".join(documents))
    text = re.sub(r"\s+", " ", text)
    for title in page_titles(book):
        assert title in text, title
    html = " ".join(page.read_text(encoding="utf-8") for page in measure_pages.html_pages(book))
    assert captions(text) == captions(re.sub(r"<[^>]+>", " ", html))
    assert "Yao, Shunyu" in text and "Building Effective Agents" in text
    images = [item.get_name() for item in read.get_items_of_type(ITEM_IMAGE)]
    # The chapters' figures stay SVG; each diagram is drawn to a PNG.
    assert len([name for name in images if name.endswith(".svg")]) >= 3, images
    diagrams = html.count('<svg class="diagram')
    assert diagrams and len([name for name in images if name.endswith(".png")]) == diagrams


def test_the_pdf_holds_the_book_and_no_text_runs_past_the_margin(
        rendered: tuple[Path, str]) -> None:
    book, _ = rendered
    if measure_pages.find_chromium() is None:
        pytest.skip(CHROMIUM_MISSING)
    if not (shutil.which("pdftoppm") and shutil.which("pdftotext")):
        pytest.skip("poppler-utils (pdftoppm, pdftotext) is not installed")
    from PIL import Image

    pdf = print_book.print_book(book, root=book.parent)
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True,
                          check=True).stdout
    flat = re.sub(r"\s+", " ", text)
    for title in page_titles(book):
        assert title in flat, title
    html = " ".join(page.read_text(encoding="utf-8") for page in measure_pages.html_pages(book))
    assert captions(flat) == captions(re.sub(r"<[^>]+>", " ", html))
    # Pages as pictures: 20 pixels per 10 mm. The printed margins are 16 mm; nothing dark
    # may reach the outer 12 mm of either side.
    pictures = pdf.parent / "pages"
    pictures.mkdir()
    subprocess.run(["pdftoppm", "-r", "50", "-png", str(pdf), str(pictures / "p")], check=True)
    crossing = []
    for picture in sorted(pictures.glob("*.png")):
        image = Image.open(picture).convert("L")
        strip = round(image.width * 12 / 210)
        for box in ((0, 0, strip, image.height),
                    (image.width - strip, 0, image.width, image.height)):
            if image.crop(box).getextrema()[0] < 160:
                crossing.append(picture.name)
    assert len(list(pictures.glob("*.png"))) > 20
    assert not crossing, crossing
    # The viewer's bookmarks: every chapter, and every numbered section under its number.
    bookmarks = pdf_outline(pdf)
    for title in page_titles(book):
        assert any(mark.endswith(title) for mark in bookmarks), (title, bookmarks)
    for page in book_files(ROOT):
        html = (book / html_for(page)).read_text(encoding="utf-8")
        for number, heading in re.findall(r'<h2 data-number="([^"]+)"[^>]*>(.*?)</h2>', html,
                                          re.DOTALL):
            text = " ".join(unescape(re.sub(r"<[^>]+>", " ", heading)).split())
            assert text in bookmarks and text.startswith(number), (text, bookmarks)


def pdf_outline(pdf: Path) -> list[str]:
    """The titles of a PDF's bookmarks, depth first, read as a PDF viewer reads them."""
    from pypdf import PdfReader

    def titles(items: list[object]) -> list[str]:
        return [title for item in items for title in (
            titles(item) if isinstance(item, list) else [getattr(item, "title", "")])]

    reader = PdfReader(pdf)
    assert "/StructTreeRoot" in reader.trailer["/Root"], "the PDF is not tagged"
    return titles(reader.outline)
