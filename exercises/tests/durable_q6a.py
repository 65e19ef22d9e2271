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

name = "durable_q6a"
points = 2

@test_case(points=0.2, hidden=False)
def test_q6a_a_hex_digest_that_depends_on_the_key(keyed_digest):
    """64 hexadecimal characters, unlike the plain digest, and different under another key."""
    assert callable(keyed_digest), 'keyed_digest is not defined: run the cell that defines it and fix the error it shows'
    from agentbook import call_digest
    arguments = {'order_id': 'A-17', 'amount_cents': 9999}
    digest = keyed_digest(b'key one', 'run-1', 'call_2', 'refund_order', arguments)
    assert digest is not None, 'not answered yet: keyed_digest returns None'
    assert isinstance(digest, str) and len(digest) == 64, f'expected 64 hexadecimal characters (hexdigest()); found {digest!r}'
    int(digest, 16)
    assert digest != call_digest('run-1', 'call_2', 'refund_order', arguments), 'expected the keyed digest to differ from the plain SHA-256 of call_digest'
    other = keyed_digest(b'key two', 'run-1', 'call_2', 'refund_order', arguments)
    assert other != digest, 'expected another key to give another digest'

@test_case(points=0.2, hidden=False)
def test_q6a_the_order_of_the_arguments_does_not_matter(keyed_digest):
    """Equal arguments in another order give the same digest: the JSON is canonical."""
    assert callable(keyed_digest), 'keyed_digest is not defined: run the cell that defines it and fix the error it shows'
    forward = {'order_id': 'A-17', 'amount_cents': 9999}
    backward = {'amount_cents': 9999, 'order_id': 'A-17'}
    first = keyed_digest(b'k', 'r', 'c', 'refund_order', forward)
    assert first is not None, 'not answered yet: keyed_digest returns None'
    assert first == keyed_digest(b'k', 'r', 'c', 'refund_order', backward), 'expected the same digest for the same arguments in another order: serialize with sort_keys=True'

@test_case(points=0.2, hidden=False)
def test_q6a_every_part_is_bound(keyed_digest):
    """Changing the run, the call, the tool or an argument changes the digest."""
    assert callable(keyed_digest), 'keyed_digest is not defined: run the cell that defines it and fix the error it shows'
    arguments = {'order_id': 'A-17', 'amount_cents': 9999}
    digest = keyed_digest(b'k', 'run-1', 'call_2', 'refund_order', arguments)
    assert digest is not None, 'not answered yet: keyed_digest returns None'
    changed = [keyed_digest(b'k', 'run-2', 'call_2', 'refund_order', arguments), keyed_digest(b'k', 'run-1', 'call_3', 'refund_order', arguments), keyed_digest(b'k', 'run-1', 'call_2', 'lookup_order', arguments), keyed_digest(b'k', 'run-1', 'call_2', 'refund_order', {**arguments, 'amount_cents': 19999})]
    assert digest not in changed, 'expected each change to give another digest'

@test_case(points=1.0, hidden=False)
def test_q6a_one_known_digest(keyed_digest):
    """One input whose HMAC-SHA256 is known: a keyed hash of another kind gives another."""
    assert callable(keyed_digest), 'keyed_digest is not defined: run the cell that defines it and fix the error it shows'
    digest = keyed_digest(b'the review key', 'run-1', 'call_2', 'refund_order', {'order_id': 'A-17', 'amount_cents': 9999})
    assert digest is not None, 'not answered yet: keyed_digest returns None'
    assert digest == 'd86fa5f16ad4497a9e0206c805def6cd2175ffea8a33581e79e473962c186dba', f"found {digest!r}: expected the HMAC-SHA256 that hmac.new computes under the key, over the canonical JSON exactly as the question gives it (sorted keys, the separators (',', ':'), UTF-8). A hash of the key and the text run together is not an HMAC: it can be extended by anyone who knows one digest"

