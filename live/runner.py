"""The page's Python side: run a cell as Jupyter would, and check an exercise as otter would.

The page's Web Worker (live/worker.js) loads this module into Pyodide. Every chapter cell runs
in one namespace, in the order the reader runs them; the exercises run in a namespace of
their own, rebuilt for each check. Each run returns JSON: what the cell printed to stdout
and stderr, the repr (and the HTML, when the value has one) of a final expression, and the
traceback of an exception.
"""

from __future__ import annotations

import ast
import io
import json
import linecache
import sys
import traceback
import types
from contextlib import redirect_stderr, redirect_stdout
from textwrap import indent
from typing import Any

CHAPTER: dict[str, Any] = {"__name__": "__main__"}
EXERCISES: dict[str, Any] = {"__name__": "__main__"}


def _remember(filename: str, code: str) -> None:
    """Let tracebacks quote the cell's lines, as Jupyter's do."""
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)


def _execute(code: str, filename: str, namespace: dict[str, Any]) -> Any:
    """Run the cell; return the value of a final expression, as Jupyter shows it."""
    _remember(filename, code)
    tree = ast.parse(code, filename)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, filename, "exec"), namespace)
    if last is None:
        return None
    return eval(compile(ast.Expression(last.value), filename, "eval"), namespace)


def run(code: str, cell_id: str, namespace: dict[str, Any] | None = None) -> str:
    """Run one cell; its outputs as JSON."""
    namespace = CHAPTER if namespace is None else namespace
    out, err = io.StringIO(), io.StringIO()
    shown: dict[str, Any] = {"text": None, "html": None, "error": None}
    with redirect_stdout(out), redirect_stderr(err):
        try:
            value = _execute(code, f"<cell {cell_id}>", namespace)
        except BaseException as failure:  # noqa: BLE001 - the reader sees every failure
            # This module's own frames come first; the reader's code starts after them.
            tb = failure.__traceback__
            while tb and not tb.tb_frame.f_code.co_filename.startswith("<cell"):
                tb = tb.tb_next
            shown["error"] = "".join(traceback.format_exception(type(failure), failure, tb))
        else:
            if value is not None:
                namespace["_"] = value
                html = getattr(value, "_repr_html_", None)
                shown["html"] = html() if callable(html) else None
                shown["text"] = repr(value)
    return json.dumps({"stdout": out.getvalue(), "stderr": err.getvalue(), **shown})


def reset_exercises() -> None:
    EXERCISES.clear()
    EXERCISES["__name__"] = "__main__"


def run_exercise(code: str, cell_id: str) -> str:
    return run(code, cell_id, EXERCISES)


# --- otter's public checks, in the page --------------------------------------------------------

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


def check(name: str, source: str) -> str:
    """The public tests of `name` against the exercise namespace, summed up as otter does."""
    filename = f"tests/{name}.py"
    module = types.ModuleType("otter.test_files")
    module.test_case = test_case  # type: ignore[attr-defined]
    sys.modules.setdefault("otter", types.ModuleType("otter"))
    sys.modules["otter.test_files"] = module
    scope: dict[str, Any] = {}
    exec(compile(source, filename, "exec"), scope)
    cases = [case for case in scope.values() if isinstance(case, test_case) and not case.hidden]
    lines, results = source.split("\n"), []
    for number, case in enumerate(cases, 1):
        label = case.name or f"{scope.get('name', name)} - {number}"
        arguments = {arg: EXERCISES if arg == "env" else EXERCISES.get(arg)
                     for arg in case.function.__code__.co_varnames[
                         :case.function.__code__.co_argcount]}
        try:
            case.function(**arguments)
        except Exception as failure:  # noqa: BLE001 - a failed check is feedback
            message = _failure(failure, scope.get("name", name), filename, lines)
            results.append((label, False, message, case))
        else:
            results.append((label, True, "✅ Test case passed", case))
    return _summary(scope.get("name", name), results)


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
