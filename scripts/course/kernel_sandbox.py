"""A student's kernel behind the operating system's boundary, where bubblewrap can make one.

kernel_bound.py keeps the time limits in the grading process; this keeps the kernel from
touching anything else. Started through ``bwrap``, the kernel and everything it starts:

- run as ``nobody`` with no capabilities, in their own user, PID, network, IPC and UTS
  namespaces: they see no other process (the grader, a classmate's kernel) and so cannot
  signal, stop or trace one; they have no network, not even the machine's own loopback, so
  they cannot reach otter's logging server (which unpickles what it receives) or another
  kernel's ports;
- see the whole file system read-only, with a fresh ``/tmp`` and a fresh, empty directory of
  Jupyter's runtime files (other kernels' connection keys); they may write only in the
  folder the notebook runs in, the results file otter reads back, the progress file and the
  kernel's own sockets. The zip, the tests, ``grades.csv`` and the feedback cannot be changed;
- die with the kernel: when the grader kills it, the namespace ends, and every process in it.

The kernel talks to the grader over Unix sockets (ZeroMQ's ``ipc`` transport) in a folder
made for it. Where ``bwrap`` is missing or cannot make namespaces (macOS, Windows, most
Docker containers, Gradescope's), kernels run as before and ``boundary()`` says so, for the
instructor's review. This file ships in every autograder zip beside run_otter.py, so it
imports only the standard library and what otter depends on.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

NOBODY = "65534"
# Where Python looks for a home: a fresh one, so nothing the kernel starts writes the grader's.
HOME = "/tmp/home"
# Otter's last cell pickles the results to a file it names; the kernel must be able to write it.
RESULTS_FILE = re.compile(r'open\("([^"]+\.pkl)", "wb"\)')


@functools.cache
def bwrap() -> str | None:
    """The ``bwrap`` that can make this sandbox here, or None."""
    found = shutil.which("bwrap")
    if found is None or os.environ.get("AGENTBOOK_NO_SANDBOX") == "1":
        return None
    try:
        probe = subprocess.run([found, *namespaces(), "--ro-bind", "/", "/", "true"],
                               capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return found if probe.returncode == 0 else None


def boundary() -> str:
    """Why a kernel runs without the sandbox here, as the grading commands print it; ""
    when it runs in one."""
    if bwrap() is not None:
        return ""
    return ("graded without an operating-system sandbox (bwrap is missing or cannot make "
            "namespaces here): its code could reach files and processes of this machine")


def namespaces() -> list[str]:
    return ["--unshare-all", "--unshare-user", "--uid", NOBODY, "--gid", NOBODY,
            "--cap-drop", "ALL", "--die-with-parent"]


def command(kernel: list[str], folder: str, writable: Iterable[str], runtime: str) -> list[str]:
    """``kernel``'s command line, run in the sandbox from ``folder``, which it may write
    (all but its tests), as it may ``writable``; all else is read-only."""
    found = bwrap()
    assert found is not None
    arguments = [found, *namespaces(), "--ro-bind", "/", "/", "--dev", "/dev",
                 "--proc", "/proc", "--tmpfs", "/tmp", "--dir", HOME, "--setenv", "HOME", HOME,
                 # Its parent is the namespace's init, pid 1, which ipykernel would take for a
                 # sign that the grader has gone; it has not, and --die-with-parent covers that.
                 "--setenv", "JPY_PARENT_PID", "1"]
    if os.path.isdir(runtime):  # other kernels' connection files, with their keys
        arguments += ["--tmpfs", runtime]
    for path in python_paths():  # a Python installed under /tmp stays visible, read-only
        arguments += ["--ro-bind", path, path]
    # The folder may be in /tmp (otter's copy of the zip is), which the sandbox replaced.
    # The notebook may write there (otter's own log does); the tests in it stay as they are.
    arguments += ["--bind", folder, folder, "--chdir", folder]
    tests = os.path.join(folder, "tests")
    if os.path.isdir(tests):
        arguments += ["--ro-bind", tests, tests]
    for path in sorted(set(writable), key=len):
        arguments += ["--bind", path, path]
    # The grader interrupts a cell with SIGINT to the kernel's process group, bwrap's too:
    # bwrap must ignore it and live on (ipykernel sets its own handler while it runs a cell).
    return ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *arguments, "--", *kernel]


def python_paths() -> list[str]:
    """The folders under /tmp that the kernel's Python needs (a virtual environment, the
    book's package), which the sandbox's fresh /tmp would otherwise hide."""
    import importlib.util
    import sys

    found = [sys.prefix, sys.exec_prefix, sys.base_prefix,
             os.path.dirname(sys.executable), *sys.path]
    spec = importlib.util.find_spec("agentbook")
    if spec is not None and spec.submodule_search_locations:
        found += [os.path.dirname(path) for path in spec.submodule_search_locations]
    under_tmp = {os.path.realpath(path) for path in found
                 if path and os.path.isdir(path)
                 and os.path.realpath(path).startswith("/tmp/")}
    # A folder and one inside it: bind the outer one only.
    return sorted(path for path in under_tmp
                  if not any(path.startswith(other + "/") for other in under_tmp))


def results_file(notebook: Any) -> str | None:
    """The file otter's last cell pickles the results to."""
    for cell in reversed(notebook.cells):
        found = RESULTS_FILE.search(cell.get("source", ""))
        if found:
            return found.group(1)
    return None


def manager_class(folder: str, writable: list[str]) -> type:
    """A KernelManager whose kernels run in the sandbox from ``folder``, writing only
    ``writable`` and their own socket folder, which goes when the kernel does."""
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.paths import jupyter_runtime_dir

    class SandboxedKernelManager(AsyncKernelManager):  # type: ignore[misc]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.sockets = tempfile.mkdtemp(prefix="agentbook-kernel-")
            self.transport = "ipc"
            self.connection_file = os.path.join(self.sockets, "kernel.json")
            self.ip = os.path.join(self.sockets, "k")

        def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
            kernel = super().format_kernel_cmd(extra_arguments)
            return command(kernel, folder, [*writable, self.sockets], jupyter_runtime_dir())

        async def cleanup_resources(self, restart: bool = False) -> None:
            await super().cleanup_resources(restart)
            if not restart:
                shutil.rmtree(self.sockets, ignore_errors=True)

    return SandboxedKernelManager


def writable_paths(notebook: Any, progress: Path) -> list[str]:
    """What a graded kernel may write: otter's results file and the progress file. Each
    must exist before the sandbox starts, to be bound into it."""
    return [path for path in (str(progress), results_file(notebook))
            if path is not None and os.path.isfile(path)]
