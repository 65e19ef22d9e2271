"""A graded kernel behind the operating system's boundary (scripts/course/kernel_sandbox.py).

One notebook tries, from inside a kernel started the way grading starts one, what hostile
students tried on a grader that shared their user and machine: rewrite the autograder zip,
the tests and the class's grades; stop the grading process; reach a port on the machine's
loopback (otter's logging server listens on one and unpickles what it gets); read another
kernel's connection file; leave a process behind; and print a flood. Where ``bwrap`` can make
the sandbox, every attempt fails while the writes grading needs still work; the output cap
holds everywhere.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import nbformat
import pytest
from jupyter_core.paths import jupyter_runtime_dir

from scripts.course import kernel_bound, kernel_sandbox

ATTACK = """\
import json, os, signal, socket, subprocess

tried = {{}}


def attempt(name, action):
    try:
        action()
        tried[name] = "done"
    except Exception as error:
        tried[name] = type(error).__name__


def write(path):
    with open(path, "a") as file:
        file.write("changed")


attempt("zip", lambda: write({zip!r}))
attempt("grades", lambda: write({grades!r}))
attempt("tests", lambda: write("tests/q1.py"))
attempt("stop the grader", lambda: os.kill({grader}, signal.SIGSTOP))
attempt("loopback", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2))
attempt("another kernel's keys", lambda: open({other!r}).read())
attempt("own folder", lambda: write("notes.txt"))
attempt("results file", lambda: write({results!r}))
subprocess.Popen(["sleep", "86124"], start_new_session=True)
print(json.dumps(tried))
"""
FLOOD = "print('x' * 1_000_000)\n" * 5


def run(notebook: nbformat.NotebookNode, folder: Path, progress: Path) -> None:
    import nbconvert.preprocessors as preprocessors

    watch = kernel_bound.Watch(kernel_bound.Limits(60, 10, 1), progress)
    with kernel_bound.bounded_execution(watch):
        executor = preprocessors.ExecutePreprocessor(kernel_name="python3")
        executor.preprocess(notebook, {"metadata": {"path": str(folder)}})
    kernel_bound.end_groups(watch.groups)


def sleepers() -> list[str]:
    found = subprocess.run(["pgrep", "-f", "sleep 86124"], capture_output=True, text=True)
    return found.stdout.split()


def test_a_graded_kernel_reaches_nothing_outside_its_folder(tmp_path: Path) -> None:
    folder, outside = tmp_path / "submission", tmp_path / "class"
    (folder / "tests").mkdir(parents=True)
    outside.mkdir()
    files = {name: outside / name for name in ("autograder.zip", "grades.csv")}
    for path in [*files.values(), folder / "tests" / "q1.py"]:
        path.write_text("as the grader wrote it\n")
    progress, results = tmp_path / "progress", tmp_path / "results.pkl"
    progress.write_text("")
    results.write_bytes(b"")
    Path(jupyter_runtime_dir()).mkdir(parents=True, exist_ok=True)
    other = Path(jupyter_runtime_dir(), f"kernel-{os.getpid()}-other.json")
    other.write_text('{"key": "a classmate\'s"}')
    listener = socket.create_server(("127.0.0.1", 0))
    sandboxed = kernel_sandbox.bwrap() is not None
    # Outside a sandbox the attack would stop this very process: only the flood runs there.
    attack = [ATTACK.format(zip=str(files["autograder.zip"]), grades=str(files["grades.csv"]),
                           grader=os.getpid(), port=listener.getsockname()[1],
                            other=str(other), results=str(results))] * sandboxed
    cells = [*attack, FLOOD, f'open("{results}", "wb")']  # otter's last cell writes there
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    try:
        run(notebook, folder, progress)
    finally:
        listener.close()
        other.unlink()
    flood = "".join(output.get("text", "") for output in notebook.cells[-2].outputs)
    assert len(flood) < kernel_bound.OUTPUT_BYTES + 1_000_001  # the cap holds everywhere
    assert "the grader kept only the first 2,000,000 bytes" in flood
    if not sandboxed:
        pytest.skip("bwrap cannot make a sandbox on this machine: " + kernel_sandbox.boundary())
    tried = json.loads(notebook.cells[0].outputs[-1]["text"])
    # Files outside the sandbox's binds are read-only, or not there at all (this test's
    # folders are in /tmp, which the sandbox replaces); the grading process and the listener
    # are in namespaces the kernel cannot see.
    assert {name: outcome == "done" for name, outcome in tried.items()} == {
        "zip": False, "grades": False, "tests": False, "stop the grader": False,
        "loopback": False, "another kernel's keys": False,
        "own folder": True, "results file": True}, tried
    assert tried["tests"] == "OSError" and tried["stop the grader"] == "ProcessLookupError"
    for path in [*files.values(), folder / "tests" / "q1.py"]:
        assert path.read_text() == "as the grader wrote it\n"
    assert sleepers() == []  # the namespace ended with the kernel
