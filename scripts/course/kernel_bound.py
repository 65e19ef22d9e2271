"""Limits on a student's kernel that the student's code cannot reach, kept by the process
that grades it.

A submission runs in a Jupyter kernel, a process of its own that nbclient starts and drives
inside otter's grading. A limit inside that process (an alarm, a flag, a wrapped function) is
only a message: the student's code can catch it, replace it, or never let it run (one long
call into C code). So the limits live here, in the grading process:

- Every cell has a deadline. Past it the kernel is interrupted, and if it has not finished
  the cell a few seconds later (``grace_seconds``), its whole process group is killed.
- Every test has one too. The time limit inside the tests (time_limit.py) writes which test
  is running to a file that this process reads. A test still running ``grace_seconds`` after
  its own limit (which the in-kernel alarm should have enforced, with a clearer message) gets
  its kernel killed the same way.
- However grading ends, the kernel's process group is killed, and with it whatever the
  student's code started; so is every process that carries this grading's mark in its
  environment and, where this process adopts orphans (Linux), every orphan it adopted.

The caller (run_otter.py) then grades again with the stopped cell or test recorded as failed.
This file ships in every autograder zip beside run_otter.py, so it imports only the standard
library and what otter itself depends on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest.mock import patch

try:  # in the book's repository
    from scripts.course import kernel_sandbox
except ImportError:  # in the autograder zip, beside this file
    import kernel_sandbox  # type: ignore[import-not-found, no-redef]

# What the grading process tells the kernel, through the environment the kernel inherits.
PROGRESS_VARIABLE = "AGENTBOOK_TEST_PROGRESS"  # the file the running test is written to
STOPPED_VARIABLE = "AGENTBOOK_STOPPED_TESTS"  # tests an earlier run had to stop: fail them
MARK_VARIABLE = "AGENTBOOK_GRADING_MARK"  # inherited by every process the submission starts
# The cells the grader runs (otter's own, the guard's) carry this in their metadata; the
# grader removes it from the submission's own cells first, so no cell of a student's has it.
GRADER_CELL = "agentbook_grader_cell"
# How long an interrupted kernel has to answer before it is killed (a test's own alarm is its
# interrupt); the tests of this book set less, to spend less time waiting.
GRACE_SECONDS = float(os.environ.get("AGENTBOOK_GRACE_SECONDS") or 3.0)
POLL_SECONDS = 0.2
# What a cell of the submission may print before the rest is dropped: a flood of output is
# otherwise kept whole in the grading process's memory.
OUTPUT_BYTES = 2_000_000


@dataclass(frozen=True)
class Limits:
    """How long a cell may run, and a test; and the grace an interrupted kernel gets."""

    cell_seconds: float = 300.0
    test_seconds: float = 10.0
    grace_seconds: float = GRACE_SECONDS


@dataclass(frozen=True)
class RunningTest:
    """A test the kernel reported it was running."""

    question: str
    name: str
    hidden: bool

    @property
    def key(self) -> str:  # how the kernel is told, on the next run, to fail it at once
        return f"{self.question}/{self.name}"

    @property
    def label(self) -> str:  # a hidden test's name is part of what stays hidden
        return "a hidden test" if self.hidden else f"test {self.name}"


def read_progress(text: str) -> RunningTest | None:
    """The test a progress line says is running: ``N start QUESTION TEST HIDDEN``, or None
    for ``N end`` and anything else."""
    parts = text.split()
    if len(parts) == 5 and parts[1] == "start":
        return RunningTest(parts[2], parts[3], parts[4] == "hidden")
    return None


@dataclass(frozen=True)
class Stopped:
    """Why grading killed a kernel: the cell it was running, and the test if one overran."""

    cell: Any  # the notebook cell (nbformat), as the executor ran it
    seconds: float  # the limit it overran
    test: RunningTest | None = None


@dataclass
class Watch:
    """The deadlines of one grading run: every cell the executor starts is watched until it
    ends, and a kernel the watch had to kill is remembered in ``stopped``."""

    limits: Limits
    progress: Path  # the kernel writes the running test here (PROGRESS_VARIABLE)
    tests: int = 0  # how many test cases the assignment has: a cell's longest legitimate run
    on_kernel: Callable[[int], None] | None = None  # told each kernel's process group
    on_cell: Callable[[Any], None] | None = None  # told each cell as it starts
    stopped: Stopped | None = None
    running: Any = None  # the cell being run, or the last one
    groups: set[int] = field(default_factory=set)

    def note_kernel(self, manager: Any) -> None:
        group = getattr(getattr(manager, "provisioner", None), "pgid", None)
        if group and group not in self.groups:
            self.groups.add(group)
            if self.on_kernel is not None:
                self.on_kernel(group)

    def cap(self) -> float:
        """The longest any one cell may run, whatever the kernel reports: the cell's own
        limit and every test's. Kernel code that keeps rewriting the progress file gains
        nothing past it."""
        return 5 * self.limits.cell_seconds + self.tests * (
            self.limits.test_seconds + self.limits.grace_seconds)

    def read(self) -> str:
        try:
            return self.progress.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return ""

    def cell_seconds(self, cell: Any) -> float:
        """A cell's limit: the grader's own cells (otter's first, which imports otter, and
        last; the guard's) get five times the student's, as they run no student code but
        under load take longer than most."""
        return self.limits.cell_seconds * (5 if is_grader_cell(cell) else 1)

    async def guard(self, manager: Any, cell: Any) -> None:
        """Watch one cell: interrupt it past its limit, kill the kernel when it does not
        answer, or when a test outlives its own limit by the grace. The cell's limit counts
        its own time, not its tests'; each test has its own limit."""
        limits, cell_seconds = self.limits, self.cell_seconds(cell)
        started = time.monotonic()
        clock = ProgressClock(self.tests)  # a line the kernel wrote already counts too
        interrupted = None
        while True:
            await asyncio.sleep(POLL_SECONDS)
            now = time.monotonic()
            if clock.read(self.read(), now):
                interrupted = None
            test = clock.running
            if now - started > self.cap():
                return await self.kill(manager, cell, self.cap(), test)
            if test is not None:
                if now - clock.began > limits.test_seconds + limits.grace_seconds:
                    return await self.kill(manager, cell, limits.test_seconds, test)
            elif interrupted is None and now - started - clock.spent > cell_seconds:
                interrupted = now
                with contextlib.suppress(Exception):  # a kernel already gone is noticed below
                    await manager.interrupt_kernel()
            elif interrupted is not None and now - interrupted > limits.grace_seconds:
                return await self.kill(manager, cell, cell_seconds, None)

    async def kill(self, manager: Any, cell: Any, seconds: float,
                   test: RunningTest | None) -> None:
        """Kill the kernel's process group; nbclient then finds the kernel dead and raises
        DeadKernelError, which the caller meets with ``stopped`` set."""
        self.stopped = Stopped(cell, seconds, test)
        with contextlib.suppress(Exception):
            if hasattr(signal, "SIGKILL"):  # the whole process group (jupyter_client)
                await manager.signal_kernel(signal.SIGKILL)
            else:  # Windows: no groups, no SIGKILL; jupyter_client ends the kernel its way
                await manager.shutdown_kernel(now=True)
        end_groups(self.groups)


@dataclass
class ProgressClock:
    """Which test a cell is running, and how long its tests took, as the progress file says.
    The kernel writes that file, so a submission can write it too: only the start of a test
    not yet started in this cell, while fewer than the assignment's tests have, and the end of
    the running test count. Rewriting the file otherwise changes nothing, so it cannot keep a
    cell alive past its limits."""

    tests: int
    seen: str = ""
    running: RunningTest | None = None
    began: float = 0.0
    spent: float = 0.0  # seconds the cell spent in tests that ended
    started: set[str] = field(default_factory=set)

    def read(self, text: str, now: float) -> bool:
        """Take a new reading of the file; True when a test began or ended."""
        if not text or text == self.seen:
            return False
        self.seen = text
        test = read_progress(text)
        if test is None:
            if self.running is None or text.split()[1:2] != ["end"]:
                return False
            self.spent += now - self.began
            self.running = None
            return True
        if test.key in self.started or len(self.started) >= self.tests:
            return False
        if self.running is not None:  # its end went unseen between two readings
            self.spent += now - self.began
        self.started.add(test.key)
        self.running, self.began = test, now
        return True


def is_grader_cell(cell: Any) -> bool:
    """Whether the grader added this cell (otter's or the guard's): told by its metadata,
    never by its source, which a student can imitate."""
    return (cell.get("metadata") or {}).get(GRADER_CELL) is True


@contextlib.contextmanager
def bounded_execution(watch: Watch,
                      prepare: Callable[[Any], None] | None = None) -> Iterator[None]:
    """Run every notebook that otter executes under ``watch``; ``prepare`` may change the
    notebook first (add cells). Otter makes nbconvert's ExecutePreprocessor, an nbclient
    NotebookClient, when it grades: this puts a subclass in its place while grading."""
    import nbconvert.preprocessors as preprocessors
    import nbformat
    from jupyter_core.utils import run_sync

    original = preprocessors.ExecutePreprocessor
    printed: dict[int, int] = {}  # bytes of output each cell sent, kept or not

    class BoundedExecutor(original):  # type: ignore[misc, valid-type]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            # No limit of nbclient's own: its interrupt waits forever for a kernel that does
            # not answer. The watch keeps the limits. Killed at once when done, so that
            # nothing the student registered (atexit, a thread) runs after the results.
            self.timeout = None
            self.timeout_func = None
            self.shutdown_kernel = "immediate"

        def preprocess(self, nb: Any, resources: Any = None, km: Any = None) -> Any:
            printed.clear()
            if prepare is not None:
                prepare(nb)
            if km is None and kernel_sandbox.bwrap() is not None:
                folder = ((resources or {}).get("metadata") or {}).get("path") or os.getcwd()
                self.kernel_manager_class = kernel_sandbox.manager_class(
                    os.path.abspath(folder), kernel_sandbox.writable_paths(nb, watch.progress))
            try:
                return super().preprocess(nb, resources, km)
            finally:
                end_groups(watch.groups)

        def preprocess_cell(self, cell: Any, resources: Any, index: int) -> Any:
            watch.running = cell  # known even if the kernel dies before the cell starts
            return super().preprocess_cell(cell, resources, index)

        async def async_execute_cell(self, cell: Any, cell_index: int,
                                     execution_count: int | None = None,
                                     store_history: bool = True) -> Any:
            watch.running = cell
            watch.note_kernel(self.km)
            if watch.on_cell is not None:
                watch.on_cell(cell)
            guard = asyncio.ensure_future(watch.guard(self.km, cell))
            try:
                return await super().async_execute_cell(cell, cell_index, execution_count,
                                                        store_history)
            finally:
                guard.cancel()

        execute_cell = run_sync(async_execute_cell)

        def output(self, outs: list[Any], msg: dict[str, Any], display_id: str | None,
                   cell_index: int) -> Any:
            if is_grader_cell(self.nb.cells[cell_index]):
                return super().output(outs, msg, display_id, cell_index)
            size = len(json.dumps(msg.get("content")))
            kept = printed.get(cell_index, 0)
            printed[cell_index] = kept + size
            if kept + size <= OUTPUT_BYTES:
                return super().output(outs, msg, display_id, cell_index)
            if kept <= OUTPUT_BYTES:  # said once, where the dropped output would have been
                outs.append(nbformat.v4.new_output("stream", name="stderr", text=(
                    f"[the grader kept only the first {OUTPUT_BYTES:,} bytes this cell "
                    "printed]\n")))
            return None

    with patch.object(preprocessors, "ExecutePreprocessor", BoundedExecutor):
        yield


# ---------------------------------------------------------------------------------------------
# Ending every process a submission started


def end_groups(groups: set[int]) -> None:
    """Kill every process left in these process groups (a kernel's, and what it forked)."""
    if not hasattr(os, "killpg"):  # Windows: jupyter_client ends each kernel itself
        return
    for group in groups:
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)


def processes() -> Iterator[tuple[int, int]]:
    """Every process this one can see, as (pid, parent pid), from /proc (Linux)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    text = Path("/proc", entry.name, "stat").read_text()
                    # "pid (command) state ppid ...": the command may hold spaces and ")".
                    yield int(entry.name), int(text.rsplit(")", 1)[1].split()[1])


def marked(mark: str) -> list[int]:
    """Every process whose environment, as it was started, carries ``mark``."""
    needle = f"{MARK_VARIABLE}={mark}".encode()
    found = []
    for pid, _ in processes():
        if pid != os.getpid():
            with contextlib.suppress(OSError):
                if needle in Path("/proc", str(pid), "environ").read_bytes().split(b"\0"):
                    found.append(pid)
    return found


def adopt_orphans() -> bool:
    """Make this process the parent of every orphan among its descendants, so that a process
    that leaves the kernel's session is still found (Linux; elsewhere nothing happens)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    set_child_subreaper = 36  # PR_SET_CHILD_SUBREAPER, from linux/prctl.h
    with contextlib.suppress(OSError, AttributeError):
        return bool(ctypes.CDLL(None, use_errno=True).prctl(set_child_subreaper, 1, 0, 0, 0)
                    == 0)
    return False


def end_processes(mark: str, groups: set[int], adopted: bool = False) -> list[int]:
    """Kill what one grading left running: its kernels' process groups, every process that
    carries its mark, and, when this process adopts orphans, every child it has. Returns the
    pids killed besides the groups' (for tests)."""
    end_groups(groups)
    killed: list[int] = []
    for _ in range(10):  # what is killed cannot fork again; a few rounds catch the rest
        found = marked(mark) + ([pid for pid, parent in processes() if parent == os.getpid()]
                                if adopted else [])
        found = [pid for pid in found if pid not in killed or alive(pid)]
        if not found:
            break
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        reap(found)
    return killed


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    state = ""
    with contextlib.suppress(OSError, IndexError):
        state = Path("/proc", str(pid), "stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"  # a zombie has ended; only its parent's wait is missing


def reap(pids: list[int]) -> None:
    """Wait for the killed children of this process, so none stays a zombie."""
    deadline = time.monotonic() + 2
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    break
            except ChildProcessError:  # not our child: its own parent waits for it
                break
            time.sleep(0.01)
