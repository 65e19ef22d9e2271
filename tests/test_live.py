"""Live cells: the rendered book runs its own cells in the page, offline.

The build tests always run: which cells the page can run, the cell ids it marks, the wheel
and the exercise steps. The browser tests serve the book rendered once per run
(tests/conftest.py) from a local HTTP server, open it in Debian's Chromium through
playwright with every request to another host aborted, and check that "Run all" prints
every stored output again, that an edit, an error and an endless loop behave, and that an
exercise's starter fails its check where the model answer passes. They skip, saying why,
where Quarto, Chromium or playwright is missing.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scripts.build import live_book
from scripts.checks.accessibility import serving
from scripts.checks.measure_pages import CHROMIUM_FLAGS, find_chromium

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "chapters" / "01_anatomy.ipynb"
LIVE_PAGES = ("chapters/01_anatomy.html", "chapters/02_durable.html",
              "chapters/03_untrusted.html", "chapters/04_protocols.html",
              "chapters/a1_real_models.html",
              "chapters/a2_run_explorer.html")
RUN_ALL_TIMEOUT = 120_000  # ms; Pyodide loads, then every cell runs


def cell(source: str, cell_id: str = "c") -> dict[str, Any]:
    return {"cell_type": "code", "id": cell_id, "source": [source], "metadata": {}}


def test_cells_that_need_only_agentbook_run_and_the_rest_say_why() -> None:
    reasons = live_book.classify([
        cell("from agentbook import make_environment\ntools, effects = make_environment()"),
        cell("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()"),
        cell("ax.plot([1, 2])"),  # reads a name only the figure cell defined
        cell("def plot(ax):\n    return ax\nfig = 1\nprint(fig)"),  # binds its own
        cell("import httpx"),
        cell("#| eval: false\nprint(1)"),
        cell("import opentelemetry.trace"),
        cell("import sys", "install-agentbook"),  # its job is done in the page already
        cell("spans = run_spans(result)"),  # agentbook loads OpenTelemetry for it
        cell("print(len(spans))"),
    ])
    assert reasons == [None, "draws a figure with matplotlib",
                       "draws a figure with matplotlib", None,
                       "talks HTTP, which the page's Python cannot",
                       "shows a call to a served model, which the book never makes",
                       "imports opentelemetry, which the page's Python does not have",
                       "installs agentbook on Colab; the page has it already",
                       *["builds OpenTelemetry spans; the page's Python has no OpenTelemetry"] * 2]


def test_at_least_nine_in_ten_of_the_chapters_cells_run_in_the_page() -> None:
    cells = live_book.code_cells(CHAPTER)
    live = sum(reason is None for reason in live_book.classify(cells))
    assert live / len(cells) >= 0.9, f"{live} of {len(cells)}"


def test_each_cell_div_gets_its_notebook_id_and_a_mismatch_is_an_error() -> None:
    page = ('<p>x</p><div id="a" class="cell" data-execution_count="1">\n'
            '<div class="sourceCode cell-code"></div></div>'
            '<div class="cell" data-layout-align="default"><div class="cell-output-display">'
            '</div></div><div id="cell-fig-x" class="cell">\n<div class="sourceCode"></div>')
    cells = [cell("print(1)", "a"), cell("#| label: fig-x\nimport pandas", "b")]
    marked = live_book.mark_page(page, cells)
    assert '<div id="a" class="cell" data-cell-id="a" data-execution_count="1">' in marked
    assert ('<div id="cell-fig-x" class="cell" data-cell-id="b" data-live="static" '
            'data-live-reason="builds a table with pandas">') in marked
    assert live_book.mark_page(marked, cells) == marked  # a second run changes nothing
    with pytest.raises(SystemExit, match="page cell a is not notebook cell z"):
        live_book.mark_page(page, [cell("1", "z"), cells[1]])
    with pytest.raises(SystemExit, match="2 code cells in the page, 1 in the notebook"):
        live_book.mark_page(page, cells[:1])


def test_the_wheel_holds_the_package_and_is_the_same_bytes_each_time(tmp_path: Path) -> None:
    first = live_book.build_wheel(tmp_path / "one").read_bytes()
    wheel = live_book.build_wheel(tmp_path / "two")
    assert wheel.read_bytes() == first
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        record = archive.read(next(n for n in names if n.endswith("RECORD"))).decode()
    modules = sorted(f"agentbook/{p.name}" for p in (ROOT / "agentbook").glob("*.py"))
    assert [name for name in names if name.startswith("agentbook/")] == modules
    assert all(f"{name},sha256=" in record for name in modules)


def test_pyodide_is_copied_only_when_each_file_has_its_pinned_hash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "node_modules" / "pyodide"
    shutil.copy(ROOT / "live" / "package-lock.json", tmp_path)
    monkeypatch.setattr(live_book, "LIVE", tmp_path)
    monkeypatch.setattr(live_book.shutil, "which", lambda name: None)
    assert live_book.copy_core(tmp_path / "out") is False  # not installed: the book stays static
    package.mkdir(parents=True)
    for name in live_book.CORE["files"]:
        (package / name).write_bytes(b"not pyodide")
    with pytest.raises(SystemExit, match="is not the pinned Pyodide"):
        live_book.copy_core(tmp_path / "out")


def test_node_modules_is_stale_when_a_pinned_package_is_missing_or_another_version(
        tmp_path: Path) -> None:
    lock = {"packages": {"": {"name": "x"},
                         "node_modules/a": {"version": "1.0.0"},
                         "node_modules/@s/b": {"version": "2.0.0"},
                         "node_modules/@s/other-platform": {"version": "2.0.0",
                                                            "optional": True}}}
    (tmp_path / "package-lock.json").write_text(json.dumps(lock), encoding="utf-8")
    for where, version in (("a", "1.0.0"), ("@s/b", "1.9.9")):
        (tmp_path / "node_modules" / where).mkdir(parents=True)
        (tmp_path / "node_modules" / where / "package.json").write_text(
            json.dumps({"version": version}), encoding="utf-8")
    assert live_book.stale_packages(tmp_path) == ["@s/b@2.0.0"]
    shutil.rmtree(tmp_path / "node_modules" / "a")
    assert live_book.stale_packages(tmp_path) == ["a@1.0.0", "@s/b@2.0.0"]


def test_the_exercise_steps_pair_each_answer_with_its_check() -> None:
    notebook = ROOT / "exercises" / "anatomy-exercises.ipynb"
    steps = live_book.exercise_steps(notebook)
    questions = [step["id"] for step in steps if step["kind"] == "question"]
    checks = [step["id"] for step in steps if step["kind"] == "check"]
    assert questions == checks and len(questions) == len(list(
        (notebook.parent / "tests").glob("anatomy_*.py")))
    assert not any("grader" in step.get("source", "") for step in steps)


# --- In the browser ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def served(rendered_book: tuple[Path, str]) -> Iterator[str]:
    """The rendered book over HTTP from this machine, as `python3 -m http.server` serves it."""
    if find_chromium() is None:
        pytest.skip("no Chromium found (set $CHROMIUM or install Debian's chromium)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    book, _ = rendered_book
    with serving(book) as origin:
        yield origin


@pytest.fixture(scope="module")
def context(served: str) -> Iterator[Any]:
    """One Chromium for this file, which can reach the local server and nothing else."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=find_chromium(),
                                             args=CHROMIUM_FLAGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        outside: list[str] = []

        def only_local(route: Any) -> None:
            if route.request.url.startswith(served):
                route.continue_()
            else:
                outside.append(route.request.url)
                route.abort()

        context.route("**/*", only_local)
        context.outside = outside
        try:
            yield context
        finally:
            browser.close()


def expected_outputs(notebook: Path) -> dict[str, dict[str, str]]:
    """Each code cell's stored output: its printed text, and the HTML it shows if any."""
    found = {}
    for stored in live_book.code_cells(notebook):
        text, html = "", ""
        for output in stored["outputs"]:  # type: ignore[attr-defined]
            data = output.get("data", {})
            if output["output_type"] == "stream":
                text += "".join(output["text"])
            elif "text/html" in data:
                html += "".join(data["text/html"])
            elif "text/plain" in data:
                text += "".join(data["text/plain"])
        found[str(stored["id"])] = {"text": text, "html": html}
    return found


def trimmed(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())


def open_page(context: Any, served: str, path: str) -> Any:
    page = context.new_page()
    page.goto(served + path)
    page.wait_for_selector(".live-toolbar")
    return page


def live_cell(page: Any, cell_id: str) -> Any:
    return page.locator(f'div[data-cell-id="{cell_id}"]')


def edit(page: Any, box: Any, code: str) -> None:
    """As a reader edits: click the code, select it all, type the new code over it (Enter
    is a key press, so the editor indents the next line itself)."""
    box.locator("pre.sourceCode").click()
    box.get_by_role("textbox").wait_for()
    page.keyboard.press("ControlOrMeta+A")
    page.keyboard.type(code)


def run_edited(page: Any, cell_id: str, code: str, key: str | None = None) -> Any:
    """Edit a cell, then run it with the Run button or, given `key`, from the keyboard."""
    box = live_cell(page, cell_id)
    edit(page, box, code)
    if key:
        page.keyboard.press(key)
    else:
        box.get_by_role("button", name="Run").click()
    output = box.locator("[data-live-output]")
    output.and_(page.locator("[data-status]")).wait_for(timeout=RUN_ALL_TIMEOUT)
    return output


@pytest.fixture(scope="module")
def pages(context: Any, served: str) -> Iterator[dict[str, Any]]:
    """Each live page, opened once for this file's tests, which use them in turn."""
    opened = {path: open_page(context, served, path) for path in LIVE_PAGES}
    yield opened
    for page in opened.values():
        page.close()


@pytest.mark.parametrize("path", LIVE_PAGES)
def test_run_all_prints_every_stored_output_again(pages: dict[str, Any], context: Any,
                                                  path: str) -> None:
    page = pages[path]
    cells = page.locator("div[data-cell-id]:not([data-live='static'])")
    statics = page.locator("div[data-cell-id][data-live='static']")
    assert statics.count() == page.locator(".live-static").count()
    page.get_by_role("button", name="Run all").click()
    page.wait_for_function(
        "n => document.querySelectorAll('[data-live-output][data-status]').length === n",
        arg=cells.count(), timeout=RUN_ALL_TIMEOUT)
    stored = expected_outputs(ROOT / path.replace(".html", ".ipynb"))
    shown = page.evaluate("""() => [...document.querySelectorAll('[data-live-output]')]
        .map(o => [o.closest('[data-cell-id]').dataset.cellId, o.dataset.status,
                   o.liveResult])""")
    differ = []
    for cell_id, status, result in shown:
        printed = result["stdout"] + result["stderr"] + (
            result["text"] if result["text"] and not result["html"] else "")
        if (status != "ok" or trimmed(printed) != trimmed(stored[cell_id]["text"])
                or trimmed(result["html"] or "") != trimmed(stored[cell_id]["html"])):
            differ.append(f"{cell_id}: {status} {printed[:300]!r} {result['error']}")
    assert not differ, "\n".join(differ)
    assert len(shown) == cells.count() and not context.outside
    # A chapter with an exercises notebook offers each of its code questions in the page.
    topic = path.removeprefix("chapters/").removesuffix(".html").split("_", 1)[-1]
    notebook = ROOT / "exercises" / f"{topic}-exercises.ipynb"
    questions = [step for step in live_book.exercise_steps(notebook)
                 if step["kind"] == "question"] if notebook.is_file() else []
    assert page.locator("[data-exercise]").count() == len(questions)
    # The explorers the live cells drew again are live: each shows its first step.
    explorers = page.locator("[data-live-output] div.run-explorer.rx-ready")
    assert explorers.count() == sum("run-explorer" in stored[cell_id]["html"]
                                    for cell_id, _, _ in shown)


def test_an_edit_runs_and_an_error_leaves_python_working(pages: dict[str, Any]) -> None:
    page = pages["chapters/01_anatomy.html"]
    output = run_edited(page, "s01-10", 'print("edited", 6 * 7, len(tools))', "Shift+Enter")
    assert (output.get_attribute("data-status"), output.inner_text().strip()) == (
        "ok", "edited 42 3")
    output = run_edited(page, "s01-12", "1/0", "Control+Enter")
    assert output.get_attribute("data-status") == "error"
    assert "ZeroDivisionError: division by zero" in output.inner_text()
    output = run_edited(page, "s01-12", "print('still here')")
    assert (output.get_attribute("data-status"), output.inner_text().strip()) == (
        "ok", "still here")
    # The copy button copies the code as edited.
    assert live_cell(page, "s01-12").locator("pre.sourceCode > code").text_content() == (
        "print('still here')")
    page.get_by_role("button", name="Reset").click()
    box = live_cell(page, "s01-12")
    assert box.locator(".cm-editor").count() == 0  # the book's block again
    assert box.locator("pre.sourceCode > code").inner_text().startswith("sneaky")
    assert box.locator("pre.sourceCode > code span.op").count() > 0
    assert box.locator("[data-live-output]").is_hidden()


# Each visible character of a block of code, with the color and weight it is drawn in.
INK = """root => {
    const drawn = [], walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        const style = getComputedStyle(node.parentElement);
        for (const character of node.textContent)
            if (character.trim()) drawn.push([character, style.color, style.fontWeight]);
    }
    return drawn;
}"""
SAME_INK = 0.97  # pandoc and lezer split a few tokens differently (`->`, `self`, dunders)


def test_every_live_cell_is_highlighted_before_and_while_it_is_edited(
        pages: dict[str, Any]) -> None:
    page = pages["chapters/02_durable.html"]
    live = "div[data-cell-id]:not([data-live='static'])"
    before = [code.evaluate(INK) for code in page.locator(f"{live} pre.sourceCode > code").all()]
    page.evaluate("() => Promise.all(window.agentbookLive.cells.map(cell => cell.edit()))")
    during = [editor.evaluate(INK) for editor in page.locator(f"{live} .cm-content").all()]
    assert len(before) == len(during) == page.locator(live).count() > 40
    same = total = 0
    for shown, edited in zip(before, during, strict=True):
        # A cell in color in the book is in color in the editor, which draws only the lines
        # near the screen.
        inks = len({tuple(ink[1:]) for ink in shown}), len({tuple(ink[1:]) for ink in edited})
        assert (inks[0] > 1) == (inks[1] > 1), inks
        assert "".join(ink[0] for ink in shown).startswith("".join(ink[0] for ink in edited))
        same += sum(a == b for a, b in zip(shown, edited, strict=False))
        total += len(edited)
    assert same / total >= SAME_INK, f"{same} of {total} characters drawn alike"
    page.get_by_role("button", name="Reset").click()


def test_the_keyboard_indents_runs_and_leaves_the_editor(pages: dict[str, Any]) -> None:
    page = pages["chapters/a2_run_explorer.html"]
    box = page.locator("div[data-cell-id]:not([data-live='static'])").first
    code = box.locator("pre.sourceCode")
    code.focus()  # reached with Tab: Enter starts editing, as a cell does in Jupyter
    page.keyboard.press("Enter")
    editor = box.get_by_role("textbox")
    editor.wait_for()
    assert editor.evaluate("e => e.contains(document.activeElement)")
    page.keyboard.press("ControlOrMeta+Home")
    page.keyboard.press("Tab")  # Tab indents inside the editor
    assert editor.inner_text().startswith("    ")
    page.keyboard.press("Escape")
    page.keyboard.press("Tab")  # Escape, then Tab, leaves it: no keyboard trap
    assert not editor.evaluate("e => e.contains(document.activeElement)")
    page.get_by_role("button", name="Reset").click()


def test_python_loads_at_the_first_sign_of_intent_and_a_textarea_stands_in(
        context: Any, served: str) -> None:
    page = context.new_page()
    page.route("**/live/editor.js", lambda route: route.abort())  # the bundle cannot load
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(served + "chapters/a2_run_explorer.html")
    page.wait_for_selector(".live-toolbar")
    page.wait_for_load_state("networkidle")
    assert not [url for url in requested if "/live/worker.js" in url or "pyodide" in url]
    box = page.locator("div[data-cell-id]:not([data-live='static'])").first
    shown = box.locator("pre.sourceCode > code").inner_text()
    with page.expect_request("**/live/worker.js"):  # a click on the code starts Python
        box.locator("pre.sourceCode").click()
    area = box.locator("textarea")
    assert area.input_value() == shown and area.evaluate("a => a === document.activeElement")
    page.keyboard.press("ControlOrMeta+Home")
    page.keyboard.press("Tab")
    assert area.input_value() == "    " + shown  # Tab indents here too
    page.close()


def test_a_stopped_endless_loop_leaves_the_page_working(pages: dict[str, Any]) -> None:
    page = pages["chapters/a2_run_explorer.html"]
    box = live_cell(page, "explorer-demo-same")
    edit(page, box, "while True:\npass")  # the editor indents `pass` itself
    box.get_by_role("button", name="Run").click()
    # The cells above run first; once this one runs, its loop never ends.
    box.get_by_role("button", name="Stop this cell").wait_for(timeout=RUN_ALL_TIMEOUT)
    page.wait_for_timeout(300)
    page.get_by_role("toolbar").get_by_role("button", name="Stop").click()
    assert "Stopped" in box.locator("[data-live-output]").inner_text()
    # A fresh Python: running the cell again runs the cells above it first.
    output = run_edited(page, "explorer-demo-same", "print(len(effects), result.stop.value)")
    assert (output.get_attribute("data-status"), output.inner_text().strip()) == (
        "ok", "1 answered")


def model_answer(question: str) -> str:
    source = json.loads((ROOT / "exercises" / "source" / "anatomy-exercises.ipynb")
                        .read_text(encoding="utf-8"))
    return next("".join(c["source"]) for c in source["cells"] if c.get("id") == question)


def test_an_exercise_starter_fails_and_the_model_answer_passes(pages: dict[str, Any]) -> None:
    page = pages["chapters/01_anatomy.html"]
    block = page.locator('[data-exercise="q1b-code"]')
    feedback = block.locator("[data-feedback]")
    block.get_by_role("button", name="Check").click()
    feedback.and_(page.locator("[data-status]")).wait_for(timeout=RUN_ALL_TIMEOUT)
    assert feedback.get_attribute("data-status") == "fail"
    assert "anatomy_q1b results:" in feedback.inner_text()
    block.locator("pre.sourceCode").click()  # the answer shows as code until clicked
    block.get_by_role("textbox").wait_for()
    page.keyboard.press("ControlOrMeta+A")
    page.keyboard.insert_text(model_answer("q1b-code"))  # pasted: its indents kept as they are
    block.get_by_role("button", name="Check").click()
    page.wait_for_function("f => f.dataset.status === 'pass'",
                           arg=feedback.element_handle(), timeout=RUN_ALL_TIMEOUT)
    assert "anatomy_q1b results: All test cases passed!" in feedback.inner_text()
    page.reload()
    kept = page.locator('[data-exercise="q1b-code"] pre > code')
    assert kept.inner_text() == model_answer("q1b-code")  # kept across the reload
