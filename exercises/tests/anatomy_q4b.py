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

name = "anatomy_q4b"
points = 2

@test_case(points=None, hidden=False)
def test_q4b_reversed_transcript_gets_the_same_verdict(reversed_q4, result_q4, effects_q4):
    """Only the two tool messages trade places, and check_run's verdict does not change."""
    from agentbook import Limits, RunResult, check_run
    assert reversed_q4 is not ..., 'not answered yet: reversed_q4 is still ...'
    assert isinstance(reversed_q4, RunResult), f'expected reversed_q4 to be a RunResult; found {type(reversed_q4)}'

    def tool_messages(result):
        return [m for m in result.state.messages if m.get('role') == 'tool']

    def other_messages(result):
        return [m for m in result.state.messages if m.get('role') != 'tool']
    original, swapped = (tool_messages(result_q4), tool_messages(reversed_q4))
    assert len(original) == 2, f'expected result_q4 to hold two tool messages; found {len(original)}: leave result_q4 as 4a made it'
    assert swapped == original[::-1], f"expected reversed_q4's two tool messages to be result_q4's in the other order; found tool_call_ids {[m.get('tool_call_id') for m in swapped]}"
    kept, was = (other_messages(reversed_q4), other_messages(result_q4))
    changed = [i for i, (a, b) in enumerate(zip(kept, was, strict=False)) if a != b]
    assert kept == was, f'expected every message but the two tool messages to stay as it was; found {len(kept)} such messages against {len(was)}, differing at positions {changed}'
    before = check_run(result_q4, effects_q4, Limits())
    after = check_run(reversed_q4, effects_q4, Limits())
    assert after == before, f"expected check_run's verdict {before}; found {after}"

@test_case(points=None, hidden=False)
def test_q4b_position_pairs_the_wrong_results(pair_by_position):
    """By position the pairs are right as run, and every one is wrong once results trade places."""
    from agentbook import ScriptedModel, make_environment, refund_gate, run_agent
    from agentbook import tool_call_message
    lookup = tool_call_message('p1', 'lookup_order', {'order_id': 'A-17'})
    policy = tool_call_message('p2', 'read_policy', {})
    message = {**lookup, 'tool_calls': lookup['tool_calls'] + policy['tool_calls']}
    tools, _ = make_environment()
    as_run = run_agent('Order A-17.', ScriptedModel(turns=[message]), tools, refund_gate)
    messages = list(as_run.state.messages)
    messages[3], messages[4] = (messages[4], messages[3])
    assert callable(pair_by_position), 'not answered yet: pair_by_position is not defined; run the cell that defines it'
    straight = pair_by_position(as_run.state.messages)
    assert straight is not None, 'not answered yet: pair_by_position returns None'
    assert list(straight) == [('p1', 'p1'), ('p2', 'p2')], f"expected [('p1', 'p1'), ('p2', 'p2')] for the transcript as run; found {straight}"
    crossed = pair_by_position(messages)
    assert list(crossed) == [('p1', 'p2'), ('p2', 'p1')], f"expected [('p1', 'p2'), ('p2', 'p1')] once the two results trade places: the i-th call with the i-th tool message, whatever its tool_call_id; found {crossed}"

