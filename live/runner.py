"""The page's Python side: run a cell as IPython would, and check an exercise as otter would.

The page's Web Workers (live/worker.js) load this module into Pyodide. The chapter's worker
runs every chapter cell in one `__main__` module, in the order the reader runs them. The
checking worker runs each check in a world of its own: `check_question` first restores
every module to its state when the worker started (agentbook is imported afresh), then runs
the exercise's set-up cells and the reader's answers in a new `__main__`, then the public
tests. Every reply is JSON; what a cell prints can also be sent while it runs.
"""

from __future__ import annotations

import __future__
import ast
import builtins
import inspect
import io
import json
import linecache
import sys
import time
import tokenize
import traceback
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from textwrap import indent
from typing import Any

# Characters of output a cell keeps, as JupyterLab and VS Code truncate: about 250 full lines,
# which the page lays out in a millisecond (100,000 on one line took 40 ms to 130 ms here);
# the longest output a chapter stores is 14,345 characters.
LIMIT = 20_000
SEND_EVERY = 0.05  # seconds between two messages of one cell's streamed output
Send = Callable[[str], Any]  # posts one JSON message to the page


class World:
    """One `__main__`: its namespace, and the `__future__` flags its earlier cells set."""

    def __init__(self) -> None:
        self.module = types.ModuleType("__main__")
        self.namespace: dict[str, Any] = self.module.__dict__
        self.namespace["display"] = display
        self.flags = 0


# --- Output: kept in order, capped, sent in batches -----------------------------------------

class Output:
    """What one cell shows, in order, as Jupyter lists outputs: stream text (consecutive
    writes to one stream merged) and displayed values. Past LIMIT characters, text is only
    counted. With `send`, the new part goes to the page at most every SEND_EVERY seconds,
    so a cell printing in a tight loop costs the page a few messages a second."""

    def __init__(self, send: Send | None = None) -> None:
        self.send = send
        self.items: list[dict[str, Any]] = []
        self.sent = 0  # how many of `items` the page has in full
        self.kept = 0
        self.left_out = 0
        self.reported = 0  # `left_out` as last sent
        self.last_send = float("-inf")

    def room(self, text: str) -> str:
        """The part of `text` the cap leaves room for; the rest is counted."""
        kept = text[:max(0, LIMIT - self.kept)]
        self.kept += len(kept)
        self.left_out += len(text) - len(kept)
        return kept

    def write(self, name: str, text: str) -> None:
        kept = self.room(text)
        if kept:
            last = self.items[-1] if len(self.items) > self.sent else None
            if last and last["type"] == "stream" and last["name"] == name:
                last["chunks"].append(kept)  # joined when sent: no quadratic concatenation
            else:
                self.items.append({"type": "stream", "name": name, "chunks": [kept]})
        self.maybe_send()

    def show(self, kind: str, value: Any) -> None:
        """A displayed value (`display`) or the cell's result, with its HTML if it has one."""
        html = getattr(value, "_repr_html_", None)
        html = html() if callable(html) and not isinstance(value, type) else None
        if isinstance(html, str) and len(html) > LIMIT - self.kept:
            self.left_out += len(html)
            html = None
        text = self.room(repr(value))
        if text or html:  # past the cap a displayed value is only counted, like text
            self.items.append({"type": kind, "text": text, "html": html})
        self.maybe_send()

    def maybe_send(self) -> None:
        if self.send and time.monotonic() - self.last_send >= SEND_EVERY:
            self.flush()

    def flush(self) -> None:
        """Send the items the page has not seen, and the count left out so far."""
        fresh = [finished(item) for item in self.items[self.sent:]]
        if self.send is None or not fresh and self.left_out == self.reported:
            return
        self.sent, self.reported = len(self.items), self.left_out
        self.last_send = time.monotonic()
        self.send(json.dumps({"outputs": fresh, "left_out": self.left_out, "limit": LIMIT}))

    def all(self) -> list[dict[str, Any]]:
        return [finished(item) for item in self.items]

    def text(self, name: str) -> str:
        return "".join(item["text"] for item in self.all()
                       if item["type"] == "stream" and item["name"] == name)


def finished(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as the page receives it: a stream's chunks joined into its text."""
    if "chunks" not in item:
        return item
    return {"type": "stream", "name": item["name"], "text": "".join(item["chunks"])}


class Stream(io.TextIOBase):
    """sys.stdout or sys.stderr while a cell runs."""

    def __init__(self, output: Output, name: str) -> None:
        self.output, self.name = output, name

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.output.write(self.name, text)
        return len(text)

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"


_current: list[Output] = []  # the running cell's output, for display()


def display(*values: Any, **options: Any) -> None:
    """IPython's display(): show each value below the cell, as its HTML when it has one.
    IPython's options (display_id, raw, ...) are accepted and have no effect here."""
    for value in values:
        if _current:
            _current[-1].show("display", value)
        else:
            print(repr(value))


@contextmanager
def capturing(output: Output) -> Iterator[None]:
    """The cell's prints go to `output`; a sleep first sends what was printed before it."""
    saved = sys.stdout, sys.stderr, time.sleep
    real_sleep = time.sleep

    def sleep(seconds: Any) -> None:
        output.flush()
        real_sleep(seconds)

    sys.stdout, sys.stderr = Stream(output, "stdout"), Stream(output, "stderr")
    time.sleep = sleep
    _current.append(output)
    try:
        yield
    finally:
        _current.pop()
        sys.stdout, sys.stderr, time.sleep = saved


# --- Compiling a cell as IPython does --------------------------------------------------------

class Compiled:
    """A cell split as IPython runs it: the body, and a last expression whose value is shown
    unless the cell ends with `;`. Only the `__future__` imports of the world's earlier cells
    apply, as in IPython; this module's own do not (`dont_inherit`)."""

    def __init__(self, code: str, filename: str, world: World) -> None:
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        tree = ast.parse(code, filename)
        last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        if last is not None:
            tree.body.pop()
        flags = world.flags | future_flags(tree) | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        self.body = compile(tree, filename, "exec", flags=flags, dont_inherit=True)
        self.last = None if last is None else compile(
            ast.Expression(last.value), filename, "eval", flags=flags, dont_inherit=True)
        self.quiet = last is not None and ends_with_semicolon(code)
        self.flags = flags & ~ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        self.awaits = any(part is not None and part.co_flags & inspect.CO_COROUTINE
                          for part in (self.body, self.last))


def future_flags(tree: ast.Module) -> int:
    flags = 0
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            for alias in node.names:
                feature = getattr(__future__, alias.name, None)
                flags |= getattr(feature, "compiler_flag", 0)
    return flags


def ends_with_semicolon(code: str) -> bool:
    """IPython's rule: the cell's last token, comments aside, is `;`."""
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER,
               tokenize.INDENT, tokenize.DEDENT}
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    last = next((token for token in reversed(tokens) if token.type not in skipped), None)
    return last is not None and last.string == ";"


# --- Running a cell --------------------------------------------------------------------------

class Job:
    """One run of one cell in a world; `reply()` is what the page receives at its end."""

    def __init__(self, code: str, cell_id: str, world: World, send: Send | None) -> None:
        self.world, self.output = world, Output(send)
        self.error: str | None = None
        self.value: Any = None
        try:
            self.compiled: Compiled | None = Compiled(code, f"<cell {cell_id}>", world)
        except SyntaxError as failure:
            self.compiled = None
            self.fail(failure)

    def run(self) -> Any:
        """The reply as JSON, or for a cell with a top-level await, a coroutine of it."""
        if self.compiled is None:
            return self.reply()
        if self.compiled.awaits:
            return self.run_async(self.compiled)
        with self.inside():
            self.value = self.evaluate(self.compiled)
        return self.reply()

    async def run_async(self, compiled: Compiled) -> str:
        with self.inside():
            body = eval(compiled.body, self.world.namespace)
            if inspect.isawaitable(body):
                await body
            value = None if compiled.last is None else eval(compiled.last,
                                                            self.world.namespace)
            self.value = await value if compiled.last and inspect.isawaitable(value) else value
        return self.reply()

    def evaluate(self, compiled: Compiled) -> Any:
        exec(compiled.body, self.world.namespace)
        return None if compiled.last is None else eval(compiled.last, self.world.namespace)

    @contextmanager
    def inside(self) -> Iterator[None]:
        """The world is `__main__` (so pickle finds the cell's classes) and its prints are
        captured; an exception becomes the reply's traceback."""
        sys.modules["__main__"] = self.world.module
        try:
            with capturing(self.output):
                yield
        except BaseException as failure:  # noqa: BLE001 - the reader sees every failure
            self.fail(failure)
        else:
            assert self.compiled is not None
            self.world.flags |= self.compiled.flags

    def fail(self, failure: BaseException) -> None:
        # This module's own frames come first; the reader's code starts after them.
        tb = failure.__traceback__
        while tb and not tb.tb_frame.f_code.co_filename.startswith("<cell"):
            tb = tb.tb_next
        text = "".join(traceback.format_exception(type(failure), failure, tb))
        self.error = text if len(text) <= LIMIT else (
            text[:LIMIT // 2] + "\n[...]\n" + text[-LIMIT // 2:])

    def reply(self) -> str:
        shown: dict[str, Any] = {"text": None, "html": None}
        quiet = self.compiled is None or self.compiled.quiet
        if self.error is None and self.value is not None and not quiet:
            self.world.namespace["_"] = self.value
            try:
                self.output.show("result", self.value)
            except Exception as failure:  # noqa: BLE001 - a broken repr is the cell's error
                self.fail(failure)
            else:
                shown = {key: self.output.items[-1][key] for key in ("text", "html")}
        self.output.flush()
        return json.dumps({
            "stdout": self.output.text("stdout"), "stderr": self.output.text("stderr"),
            **shown, "error": self.error, "outputs": self.output.all(),
            "left_out": self.output.left_out, "limit": LIMIT})


CHAPTER = World()


def run(code: str, cell_id: str, world: World | None = None, send: Send | None = None) -> Any:
    """Run one cell; its outputs as JSON (a coroutine of it if the cell awaits)."""
    return Job(code, cell_id, CHAPTER if world is None else world, send).run()


class StdinNotImplementedError(NotImplementedError):
    """What input() raises in the page, named as IPython names it where a front end
    cannot answer."""


def no_input(prompt: object = "") -> str:
    raise StdinNotImplementedError(
        "input() is not available in the page's Python: write the value into the code "
        "instead, or run the notebook in Jupyter (the chapter's Binder or Colab link)")


# --- Restoring the checking world ------------------------------------------------------------

class Snapshot:
    """Every module's top-level names as they were when the worker started, and the
    interpreter settings a cell can change; `restore` puts them back and drops every module
    imported since, so agentbook is imported afresh. For the `own` modules (this one) it
    also keeps each function's code and each class's attributes. What it keeps is held in
    tuples, which a cell that finds them (through `gc`) cannot change."""

    def __init__(self, *own: types.ModuleType) -> None:
        self.modules = tuple(sys.modules.items())
        # Pyodide's own modules keep the bridge to JavaScript running: left as they are.
        kept = [module for name, module in self.modules if name.split(".")[0] not in BRIDGE]
        self.names = tuple((module, tuple(vars(module).items())) for module in [*kept, *own])
        found = [value for module in own for value in vars(module).values()
                 if getattr(value, "__module__", None) == module.__name__]
        self.code = tuple((function, function.__code__) for function in found
                          if isinstance(function, types.FunctionType))
        self.classes = tuple((kind, tuple(vars(kind).items())) for kind in found
                             if isinstance(kind, type))
        self.builtins = tuple(vars(builtins).items())
        self.recursion = sys.getrecursionlimit()

    def restore(self) -> None:
        # The builtins first, with no builtin: a cell may have replaced len or dict.
        builtins.__dict__.clear()
        builtins.__dict__.update(self.builtins)
        known = dict(self.modules)
        for name in [name for name in sys.modules if name not in known]:
            del sys.modules[name]
        sys.modules.update(known)
        for module, items in self.names:
            saved, current = dict(items), vars(module)
            if len(saved) != len(current) or any(current.get(key, saved) is not value
                                                 for key, value in items):
                current.clear()
                current.update(saved)
        for function, code in self.code:
            function.__code__ = code
        for kind, items in self.classes:
            for key in set(vars(kind)) - {key for key, _ in items}:
                delattr(kind, key)
            for key, value in items:
                if key not in ("__dict__", "__weakref__") and vars(kind).get(key) is not value:
                    setattr(kind, key, value)
        sys.setrecursionlimit(self.recursion)
        sys.settrace(None)
        sys.setprofile(None)


BRIDGE = {"_pyodide", "pyodide", "js", "pyodide_js", "_pyodide_core"}
_pristine: list[Snapshot] = []


def seal() -> None:
    """Called once the worker has loaded this module: input() says it is unavailable, this
    module leaves sys.modules (an answer cannot import the checker to change it), and the
    state every check starts from is taken."""
    builtins.input = no_input
    this = sys.modules.pop(__name__, None)
    _pristine.append(Snapshot(*([this] if this else [])))


# --- otter's public checks, in the page ------------------------------------------------------

class test_case:  # noqa: N801 - the name otter's test files import
    """Stands in for `otter.test_files.test_case`, which the test files decorate with."""

    def __init__(self, name: str | None = None, points: float | None = None,
                 hidden: bool = False, success_message: str | None = None,
                 failure_message: str | None = None) -> None:
        self.name, self.hidden = name, hidden
        self.success_message, self.failure_message = success_message, failure_message

    def __call__(self, function: Any) -> test_case:
        self.function = function
        return self


def _failure(failure: BaseException, test: str, filename: str, lines: list[str]) -> str:
    """Otter's message for a failed case: the test file's line that raised, and the error."""
    number, tb = 0, failure.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            number = tb.tb_lineno
        tb = tb.tb_next
    quoted = indent(lines[number - 1] if number else "", "  ")
    return (f"❌ Test case failed\nError at line {number} in test {test}:\n{quoted}\n"
            f"{type(failure).__name__}: {str(failure).strip(chr(39))}")


def _results(name: str, source: str, env: dict[str, Any]) -> tuple[str, list[Any]]:
    """Run the public tests of `name` against `env`; the test's name, and each case's
    label, whether it passed, its message and the case."""
    filename = f"tests/{name}.py"
    module = types.ModuleType("otter.test_files")
    module.test_case = test_case  # type: ignore[attr-defined]
    sys.modules["otter"] = types.ModuleType("otter")
    sys.modules["otter.test_files"] = module
    # The test file sees the builtins the worker started with, whatever an answer replaced.
    pristine = dict(_pristine[0].builtins) if _pristine else dict(vars(builtins))
    scope: dict[str, Any] = {"__builtins__": pristine}
    exec(compile(source, filename, "exec", dont_inherit=True), scope)
    test = str(scope.get("name", name))
    cases = [case for case in scope.values() if isinstance(case, test_case) and not case.hidden]
    lines, results = source.split("\n"), []
    for number, case in enumerate(cases, 1):
        label = case.name or f"{test} - {number}"
        code = case.function.__code__
        arguments = {arg: env if arg == "env" else env.get(arg)
                     for arg in code.co_varnames[:code.co_argcount]}
        try:
            case.function(**arguments)
        except Exception as failure:  # noqa: BLE001 - a failed check is feedback
            results.append((label, False, _failure(failure, test, filename, lines), case))
        else:
            results.append((label, True, "✅ Test case passed", case))
    return test, results


def _summary(name: str, results: list[tuple[str, bool, str, test_case]]) -> str:
    if all(passed for _, passed, _, _ in results):
        text = f"{name} results: All test cases passed!"
        for label, _, _, case in results:
            if case.success_message is not None:
                text += f"\n{label} message: {case.success_message}"
        return text
    parts = []
    for label, passed, message, case in results:
        note = case.success_message if passed else case.failure_message
        part = f"{label} message: {note}\n\n" if note is not None else ""
        part += f"{label} result:\n{indent(message.strip(), '    ')}"
        parts.append(part.strip())
    return f"{name} results:\n" + indent("\n\n".join(parts), "    ")


# --- A whole check, in its own world ---------------------------------------------------------

def last_line(error: str) -> str:
    return error.rstrip().splitlines()[-1] if error.strip() else ""


async def check_question(request: str, send: Send | None = None) -> str:
    """Check one question as its notebook would, from the top, in a restored world.

    `request` is JSON: `steps` (each `kind`, `id`, `source`: the set-up cells and the
    reader's answers above the question, and the question's own answer last), `skip` (ids of
    answers the reader stopped, which are not run again), `name` and `tests` (the public test
    file). As in Jupyter, a cell that raises does not stop the cells after it: a set-up
    cell's error is returned in full in `setup`, an earlier answer's in one line in `notes`,
    since either can leave names missing. `send` hears each step's id before it runs, so the
    page knows which answer was running if it is stopped."""
    asked = json.loads(request)
    restore()
    found: dict[str, Any] = {"passed": False, "printed": "", "notes": [], "setup": []}
    try:
        world = await _run_steps(asked, found, send)
        test, results = _results(asked["name"], asked["tests"], world.namespace)
    except BaseException as failure:  # noqa: BLE001 - e.g. an answer broke json or builtins
        restore()  # so that the message below can be written
        found["summary"] = ("The check could not finish: "
                            + "".join(traceback.format_exception_only(failure)).strip())
        return json.dumps(found)
    found["passed"] = bool(results) and all(ok for _, ok, _, _ in results)
    found["summary"] = _summary(test, results)
    restore()
    return json.dumps(found)


def restore() -> None:
    if _pristine:
        _pristine[0].restore()


async def _run_steps(asked: dict[str, Any], found: dict[str, Any], send: Send | None) -> World:
    world, steps = World(), asked["steps"]
    for number, step in enumerate(steps):
        mine = number == len(steps) - 1
        if step["id"] in asked.get("skip", ()) and not mine:
            found["notes"].append(f"The answer to {step['id']} was stopped, so this check "
                                  "skipped it; edit it to include it again.")
            continue
        if send:
            send(json.dumps({"step": step["id"]}))
        ran = run(step["source"], step["id"], world)
        reply = json.loads(ran if isinstance(ran, str) else await ran)
        if mine:
            found["printed"] = reply["stdout"] + reply["stderr"] + (reply["error"] or "")
        elif reply["error"] and step["kind"] == "setup":
            found["setup"].append({"id": step["id"], "error": reply["error"]})
        elif reply["error"]:
            found["notes"].append(f"The answer to {step['id']} raised "
                                  f"{last_line(reply['error'])}")
    return world
