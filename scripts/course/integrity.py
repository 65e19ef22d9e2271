"""What the grader checks before it trusts a submission's results, and what it keeps secret.

The threat, plainly: the tests run in the student's kernel, beside the student's code, as in
otter and nbgrader, because they call the student's functions. Code in that process can reach
everything there, the test runner included. Nothing in the kernel is a boundary, so each check
below says where it runs (what the kernel can reach outside itself is kept by the operating
system, where kernel_sandbox.py can make a sandbox):

- In the grading process, outside the kernel: ``scan`` reads the submission's source before it
  runs and lists what reaches into the grader (importing otter, replacing signal handlers,
  editing ``sys.modules``, walking ``gc`` and the like); such a submission is flagged for an
  instructor's review. ``SafePickle`` reads the results back making only otter's result
  classes, and ``shape_changes`` compares them with the tests the grader holds.
- In the kernel, as a message: a cell the grader adds before any of the submission's code
  installs the time limit and remembers the runner (otter's test call, the limit, the result
  writer) as installed; every test file asks it, right before its tests run, whether any of
  that changed, and a cell added just before the results are written asks once more and checks
  that every test reported passed did pass. A changed runner makes the grader refuse to score
  the submission.
- ``Secrets`` holds the hidden tests' source, read before the kernel starts, and redacts any
  of it from every message the grader passes on, with each error cut to its type and first
  line.

This file ships in every autograder zip beside run_otter.py: it imports only the standard
library and otter.
"""

from __future__ import annotations

import ast
import copy as copy_module
import functools
import hashlib
import importlib.util
import inspect
import io
import pickle
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from secrets import token_hex
from typing import Any

HIDDEN_TEXT = "[hidden test text]"
OTTER_METADATA = "otter"  # a cell's metadata key that otter reads while grading
MESSAGE_CHARACTERS = 200
FAILED = "❌ Test case failed"


# ---------------------------------------------------------------------------------------------
# Messages: an error's type and first line, cut at a word, nothing of a hidden test


def cut(text: str, limit: int = MESSAGE_CHARACTERS) -> str:
    """``text`` on one line, cut after a whole word within ``limit`` characters and then
    marked " …" (a single word longer than that is cut where the limit falls)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    head = text[:limit + 1]  # a space just past the limit ends a whole word
    head = head.rsplit(" ", 1)[0] if " " in head else text[:limit]
    return head.rstrip(" ,;:.-") + " …"


def digest(source: str) -> str:
    """How a starter cell is recognized: its source without surrounding blank space."""
    return hashlib.sha256(source.strip().encode("utf-8")).hexdigest()[:16]


def hidden_tests(test_file: str) -> list[ast.FunctionDef]:
    """The functions of an otter test file decorated ``@test_case(..., hidden=True)``."""
    found = []
    for node in ast.walk(ast.parse(test_file)):
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                hidden = [keyword for keyword in getattr(decorator, "keywords", [])
                          if keyword.arg == "hidden"]
                if hidden and isinstance(hidden[0].value, ast.Constant) and hidden[0].value.value:
                    found.append(node)
    return found


WORD = re.compile(r"\w+")
WINDOW = 5  # words in a row that, found in a hidden test and not in a public one, are its text


def windows(text: str) -> set[tuple[str, ...]]:
    words = WORD.findall(text)
    return {tuple(words[i:i + WINDOW]) for i in range(len(words) - WINDOW + 1)}


@dataclass
class Secrets:
    """The hidden tests' text, to redact from anything the grader passes on."""

    windows: set[tuple[str, ...]] = field(default_factory=set)
    lines: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, test_files: Iterable[str]) -> Secrets:
        files = list(test_files)
        hidden, public, names = [], [], set()
        for text in files:
            lines = text.splitlines()
            functions = hidden_tests(text)
            spans = {(node.lineno, node.end_lineno or node.lineno) for node in functions}
            names |= {node.name for node in functions}
            inside = {n for start, end in spans for n in range(start, end + 1)}
            hidden += [line for n, line in enumerate(lines, 1) if n in inside]
            public += [line for n, line in enumerate(lines, 1) if n not in inside]
        shared = windows("\n".join(public))
        return cls(windows("\n".join(hidden)) - shared,
                   {line.strip() for line in hidden if len(line.strip()) >= 12}
                   - {line.strip() for line in public}, names)

    def redact(self, text: str) -> str:
        """``text`` with every run of a hidden test's words, and every hidden line or test
        name, replaced."""
        words = list(WORD.finditer(text))
        spans: list[tuple[int, int]] = []
        for i in range(len(words) - WINDOW + 1):
            if tuple(word.group() for word in words[i:i + WINDOW]) in self.windows:
                spans.append((words[i].start(), words[i + WINDOW - 1].end()))
        for line in self.lines:
            start = text.find(line)
            while start != -1:
                spans.append((start, start + len(line)))
                start = text.find(line, start + 1)
        for start, end in sorted(merge(spans), reverse=True):
            text = text[:start] + HIDDEN_TEXT + text[end:]
        for name in self.names:
            text = re.sub(rf"\b{re.escape(name)}\b", "a hidden test", text)
        return text

    def error(self, kind: str, value: str) -> str:
        """An error as anyone may read it: its type and first line, cut, redacted."""
        value = self.redact(str(value)).strip()
        return cut(f"{kind}: {value.splitlines()[0] if value else ''}".rstrip(": "))


def merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


# otter's message for a failed test: where it failed (one line of the test's source) and why.
OTTER_FAILURE = re.compile(r"^❌ Test case failed\nError at line (\d+) in test ([^\n]*):\n"
                           r"([^\n]*)\n([\w.]+): ?(.*)\Z", re.S)


def test_message(message: str, hidden: bool, known: Secrets) -> str:
    """A failed test's message, cleaned: a public test keeps the line otter quotes (students
    have the public tests); every error is cut to its type and first line and redacted."""
    if not message.startswith(FAILED):
        return message
    found = OTTER_FAILURE.match(message)
    if found is None:
        rest = known.redact(message[len(FAILED):]).strip()
        return f"{FAILED}\n{cut(rest.splitlines()[0])}" if rest else FAILED
    line, test, quoted, kind, value = found.groups()
    error = known.error(kind, value)
    if hidden:
        return f"{FAILED}\n{error}"
    return f"{FAILED}\nError at line {line} in test {test}:\n{quoted}\n{error}"


# ---------------------------------------------------------------------------------------------
# The source scan, in the grading process


MODULES = {  # importing these is reaching into the grader, or around it
    "otter": "imports otter, the grader",
    "signal": "uses signals, which the grader's time limit relies on",
    "gc": "walks the garbage collector's objects",
    "ctypes": "calls C code directly", "_ctypes": "calls C code directly",
    "cffi": "calls C code directly",
    "importlib": "imports code by name at run time", "runpy": "runs code by name",
    "inspect": "inspects the running program's frames and sources",
    "builtins": "changes Python's builtins",
    "faulthandler": "installs low-level handlers", "_thread": "starts low-level threads",
    "subprocess": "starts processes", "multiprocessing": "starts processes",
    "pty": "starts processes", "marshal": "loads code objects", "dill": "loads code objects",
    "threading": "starts threads, which run beside the tests and the results' writer",
}
ATTRIBUTES = {  # module.attribute -> what it does
    **{f"sys.{name}": "edits the interpreter's state"
       for name in ("modules", "settrace", "setprofile", "_getframe", "meta_path",
                    "path_hooks", "addaudithook", "setrecursionlimit")},
    **{f"os.{name}": "starts, signals or ends processes"
       for name in ("fork", "forkpty", "kill", "killpg", "setsid", "setpgrp", "setpgid",
                    "_exit", "system", "popen", "posix_spawn", "posix_spawnp", "spawnv",
                    "spawnl", "execv", "execve", "execvp", "execl", "execlp")},
    **{f"os.{name}": "reads or changes the environment the grader sets"
       for name in ("environ", "getenv", "putenv", "unsetenv")},
    **{f"threading.{name}": "reaches into every thread's execution"
       for name in ("settrace", "setprofile", "settrace_all_threads")},
}
DUNDERS = {"__globals__", "__code__", "__closure__", "__builtins__", "__subclasses__",
           "__bases__", "__mro__", "__dict__", "__getattribute__", "__import__", "__loader__",
           "__spec__", "__traceback__", "tb_frame", "f_back", "f_globals", "f_locals",
           "f_builtins", "gi_frame", "cr_frame", "ag_frame"}
CALLS = {"exec": "runs code from text", "eval": "runs code from text",
         "compile": "compiles code from text", "__import__": "imports code by name at run time",
         "get_ipython": "reaches into the kernel", "breakpoint": "starts a debugger"}
NAMED_ATTRIBUTES = {"getattr", "setattr", "delattr", "hasattr"}
GRADER_WORDS = re.compile(r"otter|autograder|Checker|GradingResults|call_func|test_case|"
                          r"agentbook_guard|AGENTBOOK_|/proc/|\btests?/|^tests?$", re.I)
MAGIC = re.compile(r"^\s*[!%]", re.M)


def scan_source(source: str) -> list[str]:
    """What one code cell does that reaches into the grader: a list of reasons."""
    reasons = ["runs shell or IPython magic commands"] if MAGIC.search(source) else []
    try:
        tree = ast.parse(MAGIC.sub("pass  # ", source))
    except SyntaxError:
        return reasons  # it raises when it runs; the grading reports that
    for node in ast.walk(tree):
        reasons += node_reasons(node)
        reasons += [f"imports {name}, which is neither Python's own nor installed"
                    for name in unknown_modules(node)]
    return list(dict.fromkeys(reasons))


def node_reasons(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [MODULES[alias.name.split(".")[0]] for alias in node.names
                if alias.name.split(".")[0] in MODULES]
    if isinstance(node, ast.ImportFrom) and node.module:
        top = node.module.split(".")[0]
        reasons = [MODULES[top]] if top in MODULES else []
        return reasons + [ATTRIBUTES[f"{top}.{alias.name}"] for alias in node.names
                          if f"{top}.{alias.name}" in ATTRIBUTES]
    if isinstance(node, ast.Attribute):
        return attribute_reasons(node.attr, node.value)
    if isinstance(node, ast.Name) and node.id in DUNDERS | {"__builtins__"}:
        return ["reaches into objects' internals"]
    if isinstance(node, ast.Name) and node.id in CALLS:  # run = exec; run(text)
        return [CALLS[node.id]]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id in CALLS:
            return [CALLS[node.func.id]]
        if node.func.id in NAMED_ATTRIBUTES and len(node.args) >= 2:
            name = node.args[1]
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)
                    and not name.value.startswith("_")):
                return ["reaches attributes by a computed or private name"]
            return attribute_reasons(name.value, node.args[0])  # getattr(os, "kill")
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        joined = constant_text(node)  # "ott" + "er.execute"
        if joined is not None and GRADER_WORDS.search(joined):
            return ["names the grader's files or internals"]
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
        text = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
        if GRADER_WORDS.search(text):
            return ["names the grader's files or internals"]
    return []


def unknown_modules(node: ast.AST) -> list[str]:
    """Modules an import names that are neither Python's own nor installed: ones the
    submission may have written itself, beside the notebook, to import code the scan never
    reads."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        names = [node.module]
    else:
        return []
    return [name for name in names if not known_module(name.split(".")[0])]


@functools.cache
def known_module(top: str) -> bool:
    """Whether the grading process can import ``top``: the kernel's folder, where a
    submission could write a module, is not on its path."""
    return top in sys.stdlib_module_names or importlib.util.find_spec(top) is not None


def attribute_reasons(attribute: str, owner: ast.AST) -> list[str]:
    """What reaching ``owner.attribute`` does, whether written with a dot or getattr."""
    reasons = ["reaches into objects' internals"] if attribute in DUNDERS else []
    if GRADER_WORDS.search(attribute):  # Checker.agentbook_guard, case.call_func
        reasons.append("names the grader's files or internals")
    if isinstance(owner, ast.Name):
        reasons.append(ATTRIBUTES.get(f"{owner.id}.{attribute}", ""))
    return [reason for reason in reasons if reason]


def constant_text(node: ast.AST) -> str | None:
    """The text a sum of string constants spells, or None when any part is not one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = constant_text(node.left), constant_text(node.right)
        return None if left is None or right is None else left + right
    return None


def scan(notebook: Any, starter: set[str]) -> list[str]:
    """What the submission's code cells do that reaches into the grader, each reason with the
    cell it is in; cells left exactly as handed out (``starter``: their digests) are skipped."""
    found: list[str] = []
    for cell in notebook.cells:
        first_line = (cell.source.strip().splitlines() or [""])[0]
        where = f"cell {cell.get('id') or first_line[:30]}"
        if OTTER_METADATA in cell.get("metadata", {}):
            found.append(f"{where} carries otter's metadata, which otter turns into code")
        if cell.cell_type == "code" and digest(cell.source) not in starter:
            found += [f"{where} {reason}" for reason in scan_source(cell.source)]
    return list(dict.fromkeys(found))


def without_otter_metadata(notebook: Any) -> Any:
    """The notebook as it is graded: no cell keeps otter's metadata. Otter pastes its
    ``tests`` into check cells it adds, unescaped, so text there would run as code the scan
    never read; the notebooks handed out carry none."""
    copy = copy_module.deepcopy(notebook)
    for cell in copy.cells:
        cell.get("metadata", {}).pop(OTTER_METADATA, None)
    return copy


# ---------------------------------------------------------------------------------------------
# The check in the kernel: the runner as installed, before any of the submission's code runs


def _agentbook_guard() -> None:
    """Remember the grader's runner as installed, and let the test files and the grader ask
    whether it is still that: ``Checker.agentbook_guard()`` raises when anything changed;
    ``Checker.agentbook_guard.report(word)`` prints the verdict the grading process reads."""
    import builtins
    import pickle
    import signal
    import sys
    import threading

    import otter.test_files as test_files
    from otter.check.notebook import Notebook
    from otter.execute import Checker
    from otter.test_files import abstract_test, exception_test

    parts = {
        "otter's test call": (exception_test.test_case, (
            "call_func", "_get_func_params", "__call__", "to_dataclass", "__init__")),
        "otter's test files": (exception_test.ExceptionTestFile, (
            "run", "from_file", "from_string", "_from_compiled_code", "_compile_string",
            "_generate_error_message")),
        "otter's scoring": (abstract_test.TestFile, (
            "__init__", "grade", "score", "possible", "passed_all", "passed_all_public",
            "resolve_test_file_points")),
        "otter's checker": (Checker, (
            "check", "check_if_not_already_checked", "get_results", "clear_results",
            "_test_files", "_track_results", "agentbook_guard")),
        "otter's notebook": (Notebook, ("check", "_grading_mode")),
        "otter's results": (test_files.GradingResults, ("__init__",)),
        "otter's test modules": (test_files, ("create_test_file", "GradingResults")),
        "otter's test classes": (exception_test, (
            "test_case", "ExceptionTestFile", "TestCaseResult")),
        "the result writer": (pickle, ("dump", "dumps", "Pickler")),
        "Python's builtins": (builtins, (
            "open", "exec", "compile", "isinstance", "getattr", "print", "__import__", "vars")),
        "the time limit": (signal, ("signal", "setitimer")),
        "the time limit's thread check": (threading, ("current_thread", "main_thread")),
    }
    modules = ("otter", "otter.execute", "otter.execute.checker", "otter.test_files",
               "otter.test_files.abstract_test", "otter.test_files.exception_test",
               "otter.check.notebook", "pickle", "signal", "builtins", "threading")
    space, loaded, write = vars, sys.modules, print
    seen: list[str] = []

    def now() -> dict[tuple[str, str], Any]:
        return {(label, name): space(owner).get(name)
                for label, (owner, names) in parts.items() for name in names}

    def changes() -> list[str]:
        found = [f"{label} ({name})" for (label, name), value in now().items()
                 if value is not baseline[(label, name)]]
        found += [f"sys.modules[{name!r}]" for name in modules
                  if sys.modules is not loaded or loaded.get(name) is not imported[name]]
        return found

    def verify() -> None:
        found = changes()
        seen.extend(change for change in found if change not in seen)
        if found:
            raise RuntimeError("the grader's test runner was changed: " + ", ".join(found))

    def report(word: str) -> None:
        found = changes()
        found += [change for change in seen if change not in found]
        outcomes = getattr(baseline[("otter's test call", "call_func")], "outcomes", {})
        forged = sorted({result.test_case.name
                         for test_file in baseline[("otter's checker", "_test_files")]
                         for result in test_file.test_case_results
                         if result.passed and True not in outcomes.get(result.test_case.name,
                                                                       ())})
        if forged:
            found.append("results of tests that did not pass (" + ", ".join(forged[:3]) + ")")
        write(f"agentbook-guard {word}: " + ("ok" if not found else
                                             "changed: " + "; ".join(found)))

    verify.report = report  # type: ignore[attr-defined]
    Checker.agentbook_guard = verify  # type: ignore[attr-defined]
    imported = {name: loaded.get(name) for name in modules}
    baseline = now()


def guard_cells(limit_code: str, word: str) -> tuple[str, str]:
    """The two cells the grader adds: one right after otter's own first cell, before any of
    the submission's code (it installs the time limit, then remembers the runner), and one
    right before otter's last cell, which writes the results (it reports, with ``word``)."""
    first = (f"from __future__ import annotations\n\n{limit_code}\n\n"
             f"{inspect.getsource(_agentbook_guard)}\n\n_agentbook_guard()\n"
             "del _agentbook_guard, _limit_every_test\n")
    last = ("__import__('otter.execute').execute.Checker.agentbook_guard.report("
            f"{word!r})\n")
    return first, last


def new_word() -> str:
    """A word only the grading process knows until its last cell runs: the guard's report."""
    return token_hex(8)


def verdict(notebook: Any, word: str) -> str | None:
    """What the guard's last cell reported in an executed notebook: None when the runner was
    intact, else what changed, or that the check could not report."""
    for cell in getattr(notebook, "cells", []):
        if cell.get("cell_type") == "code" and word in cell.source:
            text = "".join(output.get("text", "") for output in cell.get("outputs", [])
                           if output.get("output_type") == "stream")
            found = re.search(rf"agentbook-guard {word}: (.*)", text)
            if found is None:
                return "the grader's check of its runner did not report"
            return None if found.group(1).strip() == "ok" else found.group(1).strip()
    return "the grader's check of its runner did not run"


# ---------------------------------------------------------------------------------------------
# The results, as the grading process reads them back


RESULT_CLASSES = {("otter.test_files", "GradingResults"),
                  ("otter.test_files.exception_test", "ExceptionTestFile"),
                  ("otter.test_files.exception_test", "test_case"),
                  ("otter.test_files.abstract_test", "TestCase"),
                  ("otter.test_files.abstract_test", "TestCaseResult")}


class ResultsUnpickler(pickle.Unpickler):
    """Reads the results file the kernel wrote, making only otter's result classes: a pickle
    can otherwise run any code in the process that loads it, here the grader's."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in RESULT_CLASSES:
            raise pickle.UnpicklingError(f"the results hold {module}.{name}, which they "
                                         "never do: the submission wrote them")
        return super().find_class(module, name)


class SafePickle:
    """Stands in for the ``pickle`` module where otter loads the kernel's results."""

    @staticmethod
    def load(file: Any) -> Any:
        return ResultsUnpickler(file).load()

    @staticmethod
    def loads(data: bytes) -> Any:
        return ResultsUnpickler(io.BytesIO(data)).load()


class PlainUnpickler(pickle.Unpickler):
    """Reads a log record the kernel sent otter's logging server: a dict of plain values.
    Otter's server unpickles whatever reaches its port, which would run any code the sender
    chose in the grading process; this makes no object of any class."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a log record holds {module}.{name}, which it never "
                                     "does: the submission sent it")


def refuse_log(*arguments: Any, **options: Any) -> Any:
    """Stands in for otter's ``Log.from_file`` while grading. Otter loads a notebook's
    ``.OTTER_LOG`` with dill, in the grading process, outside any sandbox: a log the
    submission wrote or sent in its zip would run any code it chose there. Grading from the
    log is off, so otter reads none (it says the log could not be read, and goes on)."""
    raise ValueError("the grader reads no .OTTER_LOG: loading one could run its code")


def plain_log_record(handler: Any, data: bytes) -> Any:
    """Stands in for otter's ``LogRecordStreamHandler.unpickle``."""
    return PlainUnpickler(io.BytesIO(data)).load()


def test_shapes(test_files: dict[str, str]) -> dict[str, list[tuple[str, float, bool]]]:
    """Each question's test cases as the grader holds them, (name, points, hidden), read as
    otter reads a test file but without running it in the grading process."""
    from otter.test_files.abstract_test import TestCase, TestFile

    shapes = {}
    for text in test_files.values():
        tree = ast.parse(text)
        constants = {target.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                     for target in node.targets if isinstance(target, ast.Name)}
        name = ast.literal_eval(constants["name"])
        cases: list[Any] = []
        for node in tree.body:
            for decorator in getattr(node, "decorator_list", []):
                if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Name)
                        and decorator.func.id == "test_case"):
                    options = {keyword.arg: ast.literal_eval(keyword.value)
                               for keyword in decorator.keywords}
                    cases.append(TestCase(options.get("name") or f"{name} - {len(cases) + 1}",
                                          None, bool(options.get("hidden", False)),
                                          options.get("points"), None, None))
        points = ast.literal_eval(constants["points"]) if "points" in constants else None
        shapes[name] = [(case.name, float(case.points or 0), bool(case.hidden))
                        for case in TestFile.resolve_test_file_points(points, cases)]
    return shapes


def shape_changes(results: Any, shapes: dict[str, list[tuple[str, float, bool]]]) -> list[str]:
    """Where the results differ from the tests the grader holds: a question it does not
    have, test cases or points that are not its own, a score set by hand."""
    found = []
    for name, test_file in getattr(results, "results", {}).items():
        expected = shapes.get(name)
        cases = [(case.name, float(case.points or 0), bool(case.hidden))
                 for case in getattr(test_file, "test_cases", [])]
        results = getattr(test_file, "test_case_results", [])
        ran = [(result.test_case.name, float(result.test_case.points or 0),
                bool(result.test_case.hidden)) for result in results]
        if (expected is None or cases != expected or getattr(test_file, "_score", None) is not None
                or ran != expected or any(type(result.passed) is not bool
                                          for result in results)):
            found.append(f"the results of {name} do not match its tests")
    return found
