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

name = "anatomy_q5b"
points = 2

@test_case(points=None, hidden=False)
def test_q5b_accepts_the_chapters_gated_run(looked_up_before_refund):
    """The gated run looked A-17 up before its one successful refund."""
    from agentbook import make_environment, overreaching_model, refund_gate, run_agent
    tools, effects = make_environment()
    result = run_agent('Order A-17 arrived damaged.', overreaching_model(), tools, refund_gate)
    verdict = looked_up_before_refund(result)
    assert verdict is not None, 'not answered yet: looked_up_before_refund returns None'
    assert verdict is True, f"expected True for the chapter's gated run (lookup, denied refund, refund); found {verdict!r}"

@test_case(points=None, hidden=False)
def test_q5b_rejects_a_refund_without_a_lookup(looked_up_before_refund, result_no_lookup):
    """Your run refunded without looking the order up, and the check says so."""
    from agentbook import RunResult
    assert result_no_lookup is not ..., 'not answered yet: result_no_lookup is still ...'
    assert isinstance(result_no_lookup, RunResult), f'expected result_no_lookup to be a RunResult; found {type(result_no_lookup)}'
    calls = {}
    for message in result_no_lookup.state.messages:
        for entry in message.get('tool_calls') or []:
            calls[entry['id']] = entry['function']['name']
    names = [calls.get(o.call_id) for o in result_no_lookup.state.observations if o.ok]
    assert 'refund_order' in names, f'expected a successful refund in result_no_lookup; found successful calls {names}'
    before = names[:names.index('refund_order')]
    assert 'lookup_order' not in before, f'expected no lookup before the refund; found successful calls {names}'
    verdict = looked_up_before_refund(result_no_lookup)
    assert verdict is False, f'expected False for a refund without a lookup; found {verdict!r}'

@test_case(points=None, hidden=False)
def test_q5b_a_lookup_after_the_refund_is_too_late(looked_up_before_refund):
    """Refund first and look up afterward: the evidence came too late, so the check fails."""
    from agentbook import ScriptedModel, allow_all, answer_message, make_environment
    from agentbook import run_agent, tool_call_message
    refund = tool_call_message('a', 'refund_order', {'order_id': 'A-17', 'amount_cents': 4999})
    lookup = tool_call_message('b', 'lookup_order', {'order_id': 'A-17'})
    tools, _ = make_environment()
    model = ScriptedModel(turns=[refund, lookup, answer_message('Done.')])
    verdict = looked_up_before_refund(run_agent('Order A-17.', model, tools, allow_all))
    assert verdict is not None, 'not answered yet: looked_up_before_refund returns None'
    assert verdict is False, f'expected False when the only lookup comes after the refund; found {verdict!r}'

