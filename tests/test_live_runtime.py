"""The page's Python (live/runner.py in live/worker.js) behaves as Jupyter's does.

The first tests run live/runner.py in this Python, which is quick: cells compile as IPython
compiles them, output is capped and sent in batches, and a check runs in a world an answer
cannot change for the next check (in a subprocess, since a check restores every module).
The browser tests then drive the same runner in Pyodide through the worker's messages, on
the book rendered once per run (tests/conftest.py): every model answer of the graded
fixtures passes its check or its question is marked as checking only in Jupyter, the page
shows what IPython stored for cells written for these cases, and printed text arrives
while the cell runs. They belong to the full suite (`python3 dev.py test --full`).
"""

from __future__ import annotations

import asyncio
import builtins
import importlib.util
import json
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

from scripts.build import live_book
from tests.test_live import context, served  # noqa: F401 - the book served, one Chromium

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "fixtures" / "live" / "ipython-cases.ipynb"
SUBMISSIONS = ROOT / "tests" / "fixtures" / "submissions"
MODEL_ANSWERS = {"01_anatomy": SUBMISSIONS / "correct.ipynb",
                 "02_durable": SUBMISSIONS / "durable" / "correct.ipynb",
                 "03_untrusted": SUBMISSIONS / "untrusted" / "correct.ipynb",
                 "04_protocols": SUBMISSIONS / "protocols" / "correct.ipynb"}
TIMEOUT = 120_000  # ms; Pyodide loads, then the cells run


def load_runner() -> types.ModuleType:
    """A fresh copy of live/runner.py, as the worker loads it (without `seal`, which would
    change this process's input())."""
    spec = importlib.util.spec_from_file_location("agentbook_live", ROOT / "live" / "runner.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def runner() -> types.ModuleType:
    return load_runner()


def ran(runner: types.ModuleType, code: str, world: Any = None,
        send: Any = None) -> dict[str, Any]:
    reply = runner.run(code, "c", world, send)
    return json.loads(reply if isinstance(reply, str) else asyncio.run(reply))


# --- Outputs as Jupyter lists them ------------------------------------------------------------

def stored_outputs(cell: dict[str, Any]) -> list[list[str]]:
    """A notebook cell's outputs as [kind, text, html] rows, streams of one name merged."""
    rows: list[list[str]] = []
    for output in cell["outputs"]:
        kind = output["output_type"]
        if kind == "stream":
            text = "".join(output["text"])
            if rows and rows[-1][:2] == ["stream", output["name"]]:
                rows[-1][2] += text
            else:
                rows.append(["stream", output["name"], text])
        else:
            data = output["data"]
            rows.append(["result" if kind == "execute_result" else "display",
                         "".join(data["text/plain"]), "".join(data.get("text/html", ""))])
    return rows


def page_outputs(reply: dict[str, Any]) -> list[list[str]]:
    """The same rows from the page runner's reply."""
    return [["stream", item["name"], item["text"]] if item["type"] == "stream"
            else [item["type"], item["text"], item["html"] or ""] for item in reply["outputs"]]


def cases() -> list[dict[str, Any]]:
    cells = json.loads(CASES.read_text(encoding="utf-8"))["cells"]
    return [cell for cell in cells if cell["cell_type"] == "code"]


def test_cells_compile_as_ipython_compiles_them(runner: types.ModuleType,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`__future__` flags of the runner do not leak, a cell's own do carry on, `;` hides the
    value, display() shows, top-level await works, input() raises IPython's error, and a
    class defined in a cell pickles: as IPython stored them."""
    monkeypatch.setattr(builtins, "input", runner.no_input)  # as seal() does in the worker
    world = runner.World()
    for cell in cases():
        reply = ran(runner, "".join(cell["source"]), world)
        assert reply["error"] is None, reply["error"]
        assert page_outputs(reply) == stored_outputs(cell), cell["id"]


def test_input_says_it_is_not_available_in_the_page(runner: types.ModuleType) -> None:
    with pytest.raises(runner.StdinNotImplementedError, match="not available in the page"):
        runner.no_input("Your name? ")


def test_output_is_capped_with_a_count_of_what_was_left_out(
        runner: types.ModuleType) -> None:
    reply = ran(runner, "print('x' * 50_000_000)")
    assert reply["stdout"] == "x" * runner.LIMIT and reply["left_out"] == 50_000_001 - runner.LIMIT
    assert len(json.dumps(reply)) < 3 * runner.LIMIT  # not the 50 MB the cell printed
    reply = ran(runner, "'y' * 300_000")
    assert reply["text"] == repr("y" * 300_000)[:runner.LIMIT] and reply["left_out"] > 200_000
    reply = ran(runner, "for n in range(50_000):\n    display(n)")  # values, not text
    assert len(reply["outputs"]) < 10_000 and reply["left_out"] > 200_000


def test_printing_in_a_tight_loop_sends_a_few_batches(runner: types.ModuleType) -> None:
    sent: list[dict[str, Any]] = []
    started = time.monotonic()
    reply = ran(runner, "for n in range(30_000):\n    print(n % 10)",
                send=lambda text: sent.append(json.loads(text)))
    batches = (time.monotonic() - started) / runner.SEND_EVERY + 2
    assert 1 <= len(sent) <= batches
    assert "".join(item["text"] for batch in sent for item in batch["outputs"]) == \
        reply["stdout"]
    assert sent[-1]["left_out"] == reply["left_out"] == 60_000 - runner.LIMIT


def test_what_was_printed_before_a_sleep_is_sent_before_it(runner: types.ModuleType) -> None:
    sent: list[str] = []
    code = "import time\nprint('a')\nprint('b')\ntime.sleep(0)\nprint('c')"
    ran(runner, code, send=lambda text: sent.extend(
        item["text"] for item in json.loads(text)["outputs"]))
    # The first write goes at once; the next ones wait for the batch, or for the sleep.
    assert sent == ["a", "\nb\n", "c\n"]


# --- Checks in a world of their own ---------------------------------------------------------

def model_answers(notebook: Path) -> dict[str, str]:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return {str(cell.get("id")): "".join(cell["source"]) for cell in cells}


def check_requests(chapter: str, answers: dict[str, str]) -> dict[str, dict[str, Any]]:
    """What the page sends to check each question that runs in the page, by question id."""
    topic = chapter.split("_", 1)[1]
    notebook = ROOT / "exercises" / f"{topic}-exercises.ipynb"
    steps = live_book.exercise_steps(notebook)
    tests = {step["name"]: (notebook.parent / "tests" / f"{step['name']}.py")
             .read_text(encoding="utf-8") for step in steps if step["kind"] == "check"}
    live_book.mark_static_steps(steps, tests)
    runs = [{"kind": step["kind"], "id": step["id"],
             "source": answers.get(step["id"], step["source"])
             if step["kind"] == "question" else step["source"]}
            for step in steps if step["kind"] != "check" and "static" not in step]
    ids = [step["id"] for step in runs]
    return {step["id"]: {"name": step["name"], "tests": tests[step["name"]],
                         "steps": runs[:ids.index(step["id"]) + 1]}
            for step in steps if step["kind"] == "check" and step["id"] in ids}


def test_the_questions_the_page_cannot_check_are_marked_with_why() -> None:
    marked = {}
    for topic in ("anatomy", "durable", "untrusted", "protocols"):
        notebook = ROOT / "exercises" / f"{topic}-exercises.ipynb"
        steps = live_book.exercise_steps(notebook)
        tests = {step["name"]: (notebook.parent / "tests" / f"{step['name']}.py")
                 .read_text(encoding="utf-8") for step in steps if step["kind"] == "check"}
        live_book.mark_static_steps(steps, tests)
        marked.update({f"{topic} {step['id']}": step["static"] for step in steps
                       if "static" in step})
    spans = "builds OpenTelemetry spans; the page's Python has no OpenTelemetry"
    framework = "runs an agent framework, which the page's Python does not have"
    assert marked == {"anatomy q6b-code": "draws a figure with matplotlib",
                      "durable ex5-traces": spans, "durable q5a-code": spans,
                      "untrusted q4a-code": "starts a sandboxed Python process, which a "
                                            "browser cannot",
                      "protocols q2a-code": "imports jsonschema, which the page's Python does "
                                            "not have",
                      **{f"protocols {cell}": framework
                         for cell in ("ex3-desk", "q3a-code", "ex4-setup", "q4a-code")}}
    assert live_book.test_imports_lacking(
        "from otter.test_files import test_case\ndef t():\n    import pandas\n") == \
        "builds a table with pandas"


ISOLATION = """
import asyncio, importlib.util, json, sys
spec = importlib.util.spec_from_file_location("agentbook_live", sys.argv[1])
runner = importlib.util.module_from_spec(spec)
sys.modules["agentbook_live"] = runner
spec.loader.exec_module(runner)
runner.seal()
for request in json.loads(sys.stdin.read()):
    print(asyncio.run(runner.check_question(json.dumps(request))))
"""
# An answer that replaces agentbook's loop, the checker's summary (reached through gc, as
# the module cannot be imported), and a builtin the encoder uses.
TAMPER = """import gc, builtins, agentbook
agentbook.run_agent = None
for found in gc.get_objects():
    if isinstance(found, dict) and "_summary" in found and "check_question" in found:
        found["_summary"] = lambda name, results: name + " results: All test cases passed!"
builtins.len = None
"""


def test_a_check_cannot_be_changed_by_the_answers_of_another() -> None:
    answers = model_answers(MODEL_ANSWERS["01_anatomy"])
    model = check_requests("01_anatomy", answers)
    starter = check_requests("01_anatomy", {})["q2b-code"]
    tampered = json.loads(json.dumps(model["q1b-code"]))
    tampered["steps"][-1]["source"] = answers["q1b-code"] + "\n" + TAMPER
    broken_setup = json.loads(json.dumps(model["q1b-code"]))
    broken_setup["steps"][1]["source"] = "1 / 0"
    stopped = json.loads(json.dumps(model["q2b-code"]))
    stopped["skip"] = ["q1b-code"]
    requests = [model["q1b-code"], tampered, starter, model["q2b-code"], broken_setup, stopped]
    finished = subprocess.run([sys.executable, "-c", ISOLATION, str(ROOT / "live" / "runner.py")],
                              input=json.dumps(requests), capture_output=True, text=True,
                              check=True, cwd=ROOT, timeout=60)
    replies = [json.loads(line) for line in finished.stdout.splitlines()]
    assert [reply["passed"] for reply in replies] == [True, False, False, True, False, True]
    assert replies[1]["summary"].startswith("The check could not finish: TypeError")
    assert "anatomy_q2b - 1 result:" in replies[2]["summary"]  # the starter still fails
    assert replies[4]["setup"][0]["id"] == "ex1-happy-path"
    assert "ZeroDivisionError: division by zero" in replies[4]["setup"][0]["error"]
    assert replies[5]["notes"] == ["The answer to q1b-code was stopped, so this check "
                                   "skipped it; edit it to include it again."]


# --- In the browser --------------------------------------------------------------------------

# The page's own Python (live.js's `Python`, a worker running live/runner.py), sent one
# message; its reply, and the batches that came before it, each with the time it came.
# A reply that never comes fails the test after TIMEOUT rather than holding it forever
# (Playwright's evaluate waits without a limit of its own).
CALL = """async ({ message, timeout }) => {
  const partials = [];
  const onPartial = message.stream
    ? (partial) => partials.push({ at: performance.now(), ...partial }) : undefined;
  const silence = new Promise((_, failed) => setTimeout(() => failed(new Error(
    `the page's Python sent no reply to '${message.action}' in ${timeout} ms`)),
    timeout));
  const reply = await Promise.race([window.agentbookLive.python.call(message, onPartial),
                                    silence]);
  return { reply, partials, at: performance.now() };
}"""


def call_python(page: Any, **message: Any) -> dict[str, Any]:
    """The page's Python sent ``message``: its reply, the batches before it, their times."""
    return dict(page.evaluate(CALL, {"message": message, "timeout": TIMEOUT}))


def test_the_page_shows_what_ipython_stored_and_streams_what_it_prints(chapter: Any) -> None:
    page = chapter
    for cell in cases():
        reply = call_python(page, action="run", code="".join(cell["source"]),
                            cell=cell["id"])["reply"]
        assert page_outputs(reply) == stored_outputs(cell), cell["id"]
    code = "import time\nfor n in range(6):\n    print(n)\n    time.sleep(0.1)"
    found = call_python(page, action="run", code=code, cell="slow", stream=True)
    first = found["partials"][0]
    assert first["outputs"] == [{"type": "stream", "name": "stdout", "text": "0"}]
    assert found["at"] - first["at"] > 400  # ms: the first line came long before the end
    streamed = "".join(item["text"] for batch in found["partials"] for item in batch["outputs"])
    assert streamed == found["reply"]["stdout"] == "0\n1\n2\n3\n4\n5\n"
    # The chapter's cells get a fresh Python, without these cells' names and flags.
    page.get_by_role("toolbar").get_by_role("button", name="Reset").click()


# --- In the page: the reader's side ----------------------------------------------------------

def open_chapter(context: Any, served: str, chapter: str) -> Any:  # noqa: F811
    page = context.new_page()
    page.goto(f"{served}chapters/{chapter}.html")
    page.wait_for_selector(".live-toolbar")
    return page


# Puts code in the editor of a cell (making it, as a click on the code does) or of an answer,
# through the editor's own interface: as a paste, whatever the keyboard's focus or scroll.
PASTE = """async (box, code) => {
  const book = window.agentbookLive;
  if (box.dataset.cellId) {
    const cell = book.cells.find((found) => found.id === box.dataset.cellId);
    (await cell.edit()).setText(code);
    return;
  }
  while (!book.exerciseBlock) await new Promise((resolve) => setTimeout(resolve, 50));
  const exercises = book.exerciseBlock;
  const step = exercises.data.steps.find((found) => found.id === box.dataset.exercise);
  await exercises.edit(step, box.querySelector("pre"));  // as a click on the answer does
  exercises.editors.get(step.id).setText(code);
}"""
# What an answer holds, as shown: its editor's text, or the code block's before an editor.
SHOWN = """(box) => (box.querySelector("[role=textbox]") || box.querySelector("pre code"))
  .innerText"""


def type_code(box: Any, code: str) -> None:
    box.evaluate(PASTE, code)


def code_in(box: Any) -> str:
    box.locator("pre").first.wait_for()
    return str(box.evaluate(SHOWN))


def cell_box(page: Any, cell_id: str) -> Any:
    return page.locator(f'div[data-cell-id="{cell_id}"]')


def finished(page: Any, box: Any) -> Any:
    output = box.locator("[data-live-output]")
    # Attached, not visible: a cell that prints nothing has an empty output.
    output.and_(page.locator("[data-status]")).wait_for(state="attached", timeout=TIMEOUT)
    return output


@pytest.fixture(scope="module")
def chapter(context: Any, served: str) -> Any:  # noqa: F811
    """Chapter 1 in a page of its own: its first cells, and its exercises."""
    page = open_chapter(context, served, "01_anatomy")
    page.wait_for_selector("[data-exercise]")
    yield page
    page.close()


def test_a_stopped_cell_stays_stopped_and_keeps_what_it_printed(chapter: Any) -> None:
    page = chapter
    preview = cell_box(page, "preview")
    type_code(preview, "import time\nfor n in range(1000):\n    print('line', n)\n"
              "    time.sleep(0.1)")
    preview.get_by_role("button", name="Run this cell, preview").click()
    output = preview.locator("[data-live-output]")
    output.get_by_text("line 2").wait_for(timeout=TIMEOUT)  # streamed while it runs
    queued = cell_box(page, "make-environment")
    queued.get_by_role("button", name="Run this cell, make-environment").click()
    assert queued.locator(".live-status").inner_text() == "waiting…"
    page.get_by_role("toolbar").get_by_role("button", name="Stop").click()
    kept = output.inner_text()
    assert "line 0\nline 1\nline 2" in kept and "Stopped" in kept
    assert queued.locator(".live-status").inner_text() == "not run: stopped"
    below = cell_box(page, "tool-spec")
    below.get_by_role("button", name="Run this cell, tool-spec").click()
    below.get_by_text("not run: cell preview above was stopped").wait_for(timeout=TIMEOUT)
    assert below.get_by_role("button", name="Run from the top").is_visible()
    page.wait_for_timeout(300)
    assert output.inner_text() == kept  # the loop did not start again
    assert below.locator("[data-live-output]").get_attribute("data-status") is None
    # Once the reader has mended it, "Run from the top" runs it and the cells to this one.
    type_code(preview, "print('mended')")
    below.get_by_role("button", name="Run from the top").click()
    assert finished(page, below).get_attribute("data-status") == "ok"
    assert output.inner_text().strip() == "mended"


def test_run_all_stops_at_the_first_error_and_says_so_once_per_cell(chapter: Any) -> None:
    page = chapter
    type_code(cell_box(page, "preview"), "print('first')")
    type_code(cell_box(page, "make-environment"), "raise ValueError('on purpose')")
    page.evaluate("""() => { window.said = [];
      const region = document.querySelector('[data-announcer]');
      new MutationObserver(() => region.textContent && said.push(region.textContent))
        .observe(region, { childList: true, characterData: true, subtree: true }); }""")
    page.get_by_role("button", name="Run all").click()
    page.get_by_role("button", name="Run all").click()  # a second click runs nothing twice
    failed = finished(page, cell_box(page, "make-environment"))
    assert failed.get_attribute("data-status") == "error"
    assert "ValueError: on purpose" in failed.inner_text()
    page.get_by_text("stopped at cell make-environment, which raised an error").wait_for()
    statuses = page.evaluate("""() => [...document.querySelectorAll('div[data-cell-id]')]
      .filter(d => d.querySelector('[data-live-output]'))
      .map(d => [d.dataset.cellId, d.querySelector('[data-live-output]').dataset.status,
                 d.querySelector('.live-status').textContent])""")
    ran = [cell_id for cell_id, status, _ in statuses if status]
    assert ran == ["preview", "tool-spec", "make-environment"]
    assert all(text == "not run: cell make-environment raised an error"
               for _, status, text in statuses[3:])
    page.wait_for_timeout(200)
    assert page.evaluate("said") == [
        "Cell preview done: first", "Cell tool-spec done",
        "Cell make-environment raised ValueError: on purpose"]
    page.get_by_role("toolbar").get_by_role("button", name="Reset").click()


# The gaps between the page's frames while a cell runs, and the size of each batch of output
# the page received.
WATCH = """() => {
  const python = window.agentbookLive.python;
  if (!python.watched) {
    const call = python.call.bind(python);
    python.call = (message, onPartial) => call(message, onPartial && ((partial) => {
      window.batches.push(JSON.stringify(partial).length);
      onPartial(partial);
    }));
    python.watched = true;
  }
  window.batches = [];
  window.gaps = [];
  window.ticking = true;
  let last = performance.now();
  const tick = (now) => {
    gaps.push(now - last);
    last = now;
    if (window.ticking) requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
}"""


def test_a_cell_printing_50_mb_leaves_the_page_responsive(chapter: Any) -> None:
    page = chapter
    box = cell_box(page, "preview")
    type_code(box, "print('x' * 50_000_000)")
    call_python(page, action="load")
    longest = []
    for _ in range(3):  # the best of three: two shared cores add gaps of their own
        page.evaluate(WATCH)
        box.get_by_role("button", name="Run this cell, preview").click()
        output = finished(page, box)
        page.evaluate("() => { window.ticking = false; }")
        assert "49,980,001 more characters left out" in output.inner_text()
        assert len(output.inner_text()) < 21_000
        batches = page.evaluate("batches")
        assert len(batches) <= 3 and max(batches) < 25_000  # the page got 20,000, not 50 MB
        longest.append(max(page.evaluate("gaps")))
        if longest[-1] < 200:
            break
    assert min(longest) < 200, longest  # ms between two frames
    page.get_by_role("toolbar").get_by_role("button", name="Reset").click()


def exercise(page: Any, question: str) -> Any:
    return page.locator(f'[data-exercise="{question}"]')


def checked(page: Any, block: Any) -> str:
    """Wait for the block's check to end; its feedback."""
    page.wait_for_function("f => f.dataset.status", arg=block.locator(
        "[data-feedback]").element_handle(), timeout=TIMEOUT)
    return str(block.locator("[data-feedback]").inner_text())


@pytest.mark.parametrize("chapter_name", sorted(MODEL_ANSWERS))
def test_every_model_answer_passes_in_the_page_or_is_marked(
        context: Any, served: str, chapter_name: str,  # noqa: F811
        request: pytest.FixtureRequest) -> None:
    # Chapter 1's page is the one the other tests use: its Python is loaded already.
    page = request.getfixturevalue("chapter") if chapter_name == "01_anatomy" else \
        open_chapter(context, served, chapter_name)
    page.wait_for_selector("[data-exercise]")
    # A chapter cell that breaks agentbook breaks the chapter's Python, not the checks'.
    broken = call_python(page, action="run", cell="breaks", code=(
        "import agentbook\nagentbook.run_agent = agentbook.make_environment = None"))
    assert broken["reply"]["error"] is None
    answers = model_answers(MODEL_ANSWERS[chapter_name])
    questions = page.evaluate("() => [...document.querySelectorAll('[data-exercise]')]"
                              ".map(block => block.dataset.exercise)")
    for question in questions:
        type_code(exercise(page, question), answers[question])
    marked = []
    for question in questions:
        block = exercise(page, question)
        name = question.removesuffix("-code")
        if block.get_by_text("Checks only in Jupyter").count():
            assert block.locator(".live-jupyter-only a").count() == 2  # Binder and Colab
            marked.append(question)
            continue
        block.get_by_role("button", name=f"Check {name}", exact=False).click()
        feedback = checked(page, block)
        assert block.locator("[data-feedback]").get_attribute("data-status") == "pass", feedback
        assert "results: All test cases passed!" in feedback
    assert marked == {"01_anatomy": ["q6b-code"], "02_durable": ["q5a-code"],
                      "03_untrusted": ["q4a-code"],
                      "04_protocols": ["q2a-code", "q3a-code", "q4a-code"]}[chapter_name]
    if chapter_name != "01_anatomy":
        page.close()


def test_checks_queue_say_so_and_the_toolbar_tells_the_truth(chapter: Any) -> None:
    page = chapter
    first, second = exercise(page, "q1b-code"), exercise(page, "q2b-code")
    type_code(first, "while True:\n    pass")  # runs until stopped
    first.get_by_role("button", name="Check q1b").click()
    page.get_by_text("checking q1b-code…").wait_for(timeout=TIMEOUT)
    second.get_by_role("button", name="Check q2b").click()
    assert second.locator("[data-feedback]").inner_text() == \
        "waiting for the check that is running…"
    assert page.locator("[data-live-state]").inner_text() == "checking q1b-code…"
    first.get_by_role("button", name="Stop checking q1b").click()
    assert "Stopped while running the answer to q1b-code" in checked(page, first)
    assert "anatomy_q2b results:" in checked(page, second)  # the queued check ran after
    type_code(first, "print('quick')")
    # Each Check names its question; Shift+Enter in an answer checks it.
    names = page.evaluate("""() => [...document.querySelectorAll('[data-exercise] button')]
        .map(b => b.getAttribute('aria-label')).filter(l => l.startsWith('Check '))""")
    assert len(names) == len(set(names)) == 11 and "Check q7b (Shift+Enter)" in names
    first.get_by_role("textbox").press("Shift+Enter")
    # Not the transient "checking…" line: a quick answer can come and go between two polls.
    page.wait_for_function("f => f.dataset.status && !f.textContent.includes('Stopped')",
                           arg=first.locator("[data-feedback]").element_handle(),
                           timeout=TIMEOUT)
    assert "anatomy_q1b results:" in checked(page, first)


def test_a_stopped_answer_is_skipped_by_later_checks(chapter: Any) -> None:
    page = chapter
    first, later = exercise(page, "q1b-code"), exercise(page, "q3a-code")
    skipped = "The answer to q1b-code was stopped, so this check skipped it"
    type_code(first, "while True:\n    pass")
    later.get_by_role("button", name="Check q3a").click()
    page.get_by_text("checking q3a-code…").wait_for(timeout=TIMEOUT)
    page.wait_for_timeout(1500)  # the endless answer above is running
    later.get_by_role("button", name="Stop checking q3a").click()
    assert "Stopped while running the answer to q1b-code" in checked(page, later)
    later.get_by_role("button", name="Check q3a").click()
    page.wait_for_function("f => f.dataset.status && !f.textContent.includes('Stopped')",
                           arg=later.locator("[data-feedback]").element_handle(),
                           timeout=TIMEOUT)
    assert skipped in checked(page, later) and "anatomy_q3a results:" in checked(page, later)
    # Edited, it runs again; endless, it is stopped by the time limit, without a click.
    type_code(first, "while True:\n    pass\n")
    page.evaluate("() => { window.agentbookLive.answerLimit = 1000; }")
    later.get_by_role("button", name="Check q3a").click()
    page.wait_for_function("f => f.dataset.status && f.textContent.includes('results:')",
                           arg=later.locator("[data-feedback]").element_handle(),
                           timeout=TIMEOUT)
    assert skipped in checked(page, later)
    page.evaluate("() => { window.agentbookLive.answerLimit = 10000; }")


def test_a_check_whose_own_tests_never_return_is_stopped_and_named(chapter: Any) -> None:
    # The looping q5a of the graded fixtures: its cell runs, but the function it defines
    # never returns the second time a test calls it. One second of limit, not ten, keeps
    # this test cheap; the message gives the limit the page applied.
    page = chapter
    block = exercise(page, "q5a-code")
    looping = model_answers(SUBMISSIONS / "wrong-q5a-never-returns.ipynb")["q5a-code"]
    type_code(block, looping)
    page.evaluate("() => { window.agentbookLive.answerLimit = 1000; }")
    try:
        block.get_by_role("button", name="Check q5a").click()
        feedback = checked(page, block)
    finally:
        page.evaluate("() => { window.agentbookLive.answerLimit = 10000; }")
    assert block.locator("[data-feedback]").get_attribute("data-status") == "fail"
    assert feedback.startswith("q5a: its answer or its tests did not finish within 1 s"), \
        feedback
    type_code(block, model_answers(MODEL_ANSWERS["01_anatomy"])["q5a-code"])
    block.get_by_role("button", name="Check q5a").click()
    feedback = checked(page, block)  # the click cleared the failed check's status
    assert block.locator("[data-feedback]").get_attribute("data-status") == "pass", feedback
    assert "anatomy_q5a results: All test cases passed!" in feedback


def test_start_over_can_be_undone_and_another_tab_is_noticed(
        chapter: Any, context: Any) -> None:  # noqa: F811
    page = chapter
    block = exercise(page, "q4a-code")
    type_code(block, "both_reads = 'mine'")
    block.get_by_role("button", name="Start over q4a").click()
    assert code_in(block).startswith("both_reads = ...")
    block.get_by_role("button", name="Undo starting over q4a").click()
    assert code_in(block) == "both_reads = 'mine'"
    other = context.new_page()
    other.goto(page.url)
    other.wait_for_selector('[data-exercise="q4a-code"]')
    assert code_in(exercise(other, "q4a-code")) == "both_reads = 'mine'"  # the last saved
    type_code(exercise(other, "q4a-code"), "both_reads = 'theirs'")
    block.get_by_text("Another tab changed this answer").wait_for(timeout=10_000)
    assert code_in(block) == "both_reads = 'mine'"
    page.reload()  # this tab's answer is this tab's, after a reload too
    page.wait_for_selector('[data-exercise="q4a-code"]')
    assert code_in(exercise(page, "q4a-code")) == "both_reads = 'mine'"
    other.close()
