from otter.test_files import test_case

# Every test below runs within a time limit: the exercises' build adds these
# lines to every test file (scripts/course/time_limit.py says why).
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


_limit_every_test(10, "AGENTBOOK_TEST_TIME_LIMIT")

OK_FORMAT = False

name = "durable_q2a"
points = 2

@test_case(points=0.4, hidden=False)
def test_q2a_a_repeated_key_pays_once(once_per_key):
    """One refund sent twice under one key: one receipt, and the first result both times."""
    assert callable(once_per_key), 'once_per_key is not defined: run the cell that defines it and fix the error it shows'
    from agentbook import make_environment
    tools, effects = make_environment()
    refund = once_per_key(tools['refund_order'].handler)
    assert refund is not None, 'not answered yet: once_per_key returns None'
    paid = {'order_id': 'A-17', 'amount_cents': 4999}
    first = refund(**paid, idempotency_key='k1')
    again = refund(**paid, idempotency_key='k1')
    assert len(effects) == 1, f'expected one receipt for one key sent twice; found {len(effects)} in the effect log'
    assert again == first, f'expected the repeat to return the first result, {first!r}; found {again!r}'

@test_case(points=0.4, hidden=False)
def test_q2a_without_a_key_or_under_a_new_key_every_call_pays(once_per_key):
    """No key means no memory; a new key is a new refund, even for the same arguments."""
    assert callable(once_per_key), 'once_per_key is not defined: run the cell that defines it and fix the error it shows'
    from agentbook import make_environment
    tools, effects = make_environment()
    refund = once_per_key(tools['refund_order'].handler)
    assert refund is not None, 'not answered yet: once_per_key returns None'
    paid = {'order_id': 'A-17', 'amount_cents': 4999}
    refund(**paid)
    refund(**paid)
    assert len(effects) == 2, f'expected both calls without a key to pay, as the bare handler would; found {len(effects)} receipt(s)'
    refund(**paid, idempotency_key='a')
    refund(**paid, idempotency_key='b')
    assert len(effects) == 4, f'expected the keys a and b to pay once each, though the arguments are the same; found {len(effects) - 2} receipt(s) for them'

@test_case(points=0.4, hidden=False)
def test_q2a_a_key_reused_for_other_arguments_is_refused(once_per_key):
    """The same key for another amount raises ValueError and moves no money."""
    assert callable(once_per_key), 'once_per_key is not defined: run the cell that defines it and fix the error it shows'
    from agentbook import make_environment
    tools, effects = make_environment()
    refund = once_per_key(tools['refund_order'].handler)
    assert refund is not None, 'not answered yet: once_per_key returns None'
    refund(order_id='A-17', amount_cents=10, idempotency_key='k')
    try:
        found = refund(order_id='A-17', amount_cents=11, idempotency_key='k')
    except ValueError:
        pass
    else:
        raise AssertionError(f'expected a ValueError for the key k reused for another amount; found it returned {found!r}')
    assert len(effects) == 1, f'expected only the first refund in the log; found {effects}'

