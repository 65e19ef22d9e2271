"""A time limit on every test of every question: the lines the exercises' build puts at the
top of every test file that ``otter assign`` writes (see ``with_time_limit`` below).

Why in the test files, and not in a helper the tests call or in the grading command: a test
file is the one thing that every path loads, by executing it, in the very process that runs
its tests, whether that is the student's kernel (``grader.check`` in Jupyter), the kernel
``otter run`` starts for the class command, or the one in ``otter grade``'s container or on
Gradescope. So the limit reaches every question of every assignment, present and future,
without a line in any exercise source and without installing anything. It replaces otter's
own way of calling a test (``test_case.call_func``), once per process, instead of wrapping
each test: otter quotes the line of a failed test by counting frames from that call, and a
wrapper would make it quote the wrapper.

This limit lives in the student's own process, so it is a message, not a boundary: code that
never returns to the interpreter, or that replaces the alarm, outlives it. When grading, the
grading process keeps the boundary (kernel_bound.py): the lines below tell it which test is
running, through a file it names, and it kills a kernel whose test outlives its limit, then
grades again with that test failed at once. They also report which tests passed, and, before
any test file runs its tests, ask the grader's check (integrity.py) whether the submission
changed the runner; when it did, the tests do not run.

The page's Check button runs the tests with a stand-in for otter that has none of this; the
page stops a check that runs too long by restarting its interpreter (live/live.js).
"""

from __future__ import annotations

import inspect

OTTER_IMPORT = "from otter.test_files import test_case\n"
DEFAULT_SECONDS = 10  # no test takes more than a fraction of a second on a correct answer
ENVIRONMENT_VARIABLE = "AGENTBOOK_TEST_TIME_LIMIT"  # seconds, to change the limit per run


def _limit_every_test(default_seconds: float = 10, variable: str = "") -> None:
    """Run every otter test within a time limit, so that a function that never returns
    costs only the tests that call it; the failure names the question, the call and the
    limit. Where there is no SIGALRM (Windows) tests run without one."""
    import os
    import signal
    import threading

    try:
        from otter.execute import Checker
        from otter.test_files.exception_test import test_case as case_type
    except ImportError:  # the page's stand-in for otter, which stops a check itself
        return
    guard = getattr(Checker, "agentbook_guard", None)
    if guard is not None:  # grading: the grader installed the limit; has anything changed it?
        guard()  # raises when the submission changed the runner: no test below runs
        return
    if getattr(case_type.call_func, "time_limited", False) or not hasattr(signal, "setitimer"):
        return
    # Set by the grading process (kernel_bound.py): where to say which test runs, and which
    # tests an earlier run of this submission had to stop from outside, to fail at once.
    progress = os.environ.get("AGENTBOOK_TEST_PROGRESS")
    stopped = set(os.environ.get("AGENTBOOK_STOPPED_TESTS", "").split())
    runs = [0]
    outcomes = {}  # test case name -> the outcomes seen, for the grader's check

    class TestTimedOut(BaseException):
        """Not an Exception, so that a student's `except Exception:` cannot swallow it."""

    def report(text):
        if progress:
            try:
                with open(progress, "w", encoding="utf-8") as file:
                    file.write(text)
            except OSError:
                pass

    def what_ran(frame, test):
        callee = None
        while frame is not None and frame.f_code is not getattr(test, "__code__", None):
            callee, frame = frame, frame.f_back
        if frame is None or callee is None:
            return "the test itself"
        return f"calling {getattr(callee.f_code, 'co_qualname', callee.f_code.co_name)}()"

    def call_func(self, global_environment):
        test = self.test_func
        arguments = {name: global_environment if name == "env" else global_environment.get(name)
                     for name in self._get_func_params()}
        seconds = float(os.environ.get(variable) or default_seconds)
        question = getattr(test, "__globals__", {}).get("name", "?")
        label = "a hidden test" if self.hidden else f"test {test.__name__}"
        outcome = outcomes.setdefault(self.name, set())
        if f"{question}/{test.__name__}" in stopped:
            outcome.add(False)
            error = TimeoutError(f"{question}: {label} did not finish within {seconds:g} s, "
                                 "even when interrupted, so grading stopped it")
            # Raised as if from the test's first line, the frame otter quotes.
            first = getattr(test, "__code__", call_func.__code__).co_firstlineno
            exec(compile("\n" * (first - 1) + "raise error", "<test>", "exec"), {"error": error})

        def stop(signum, frame):
            if frame is not None and frame.f_code is not call_func.__code__:
                raise TestTimedOut(f"{question}: {what_ran(frame, test)} did not finish "
                                   f"within {seconds:g} s ({label})")

        runs[0] += 1
        report(f"{runs[0]} start {question} {test.__name__} "
               f"{'hidden' if self.hidden else 'public'}")
        try:
            if threading.current_thread() is not threading.main_thread():
                test(**arguments)  # signals reach only the main thread; the grader's bound holds
            else:
                previous = signal.signal(signal.SIGALRM, stop)
                # Again every half second, in case the student's code catches the first one.
                signal.setitimer(signal.ITIMER_REAL, seconds, 0.5)
                try:
                    test(**arguments)
                except TestTimedOut as timed_out:
                    # Raised from the test's frame, as otter expects, to quote the test's line.
                    raise TimeoutError(str(timed_out)).with_traceback(
                        timed_out.__traceback__.tb_next) from None
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    signal.signal(signal.SIGALRM, previous)
        except BaseException:
            outcome.add(False)
            raise
        finally:
            report(f"{runs[0]} end")
        outcome.add(True)

    call_func.time_limited = True
    call_func.outcomes = outcomes
    case_type.call_func = call_func


def limit_code(seconds: float = DEFAULT_SECONDS) -> str:
    """The lines a test file gets: the function above, and its call with the limit."""
    block = inspect.getsource(_limit_every_test).rstrip("\n")
    return ("# Every test below runs within a time limit: the exercises' build adds these\n"
            "# lines to every test file (scripts/course/time_limit.py says why).\n"
            f'{block}\n\n\n_limit_every_test({seconds:g}, "{ENVIRONMENT_VARIABLE}")\n')


def with_time_limit(test_file: str, seconds: float = DEFAULT_SECONDS) -> str:
    """An otter test file with the time limit inserted after its import of ``test_case``."""
    if not test_file.startswith(OTTER_IMPORT):
        raise ValueError("not a test file that otter assign wrote: it does not begin with "
                         f"{OTTER_IMPORT.strip()!r}")
    if "_limit_every_test(" in test_file:
        return test_file
    return OTTER_IMPORT + "\n" + limit_code(seconds) + test_file[len(OTTER_IMPORT):]
