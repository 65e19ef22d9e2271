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

name = "anatomy_q3b"
points = 3

@test_case(points=None, hidden=False)
def test_q3b_the_second_refusal_for_one_reason_ends_the_run(run_agent_windowed):
    """Different amounts refused for the same reason: the second refusal ends the run."""
    from agentbook import RunResult, ScriptedModel, Stop, make_environment, refund_gate
    from agentbook import tool_call_message

    def cycle():
        amounts = [9999, 8000, 6000] * 4
        lookup = tool_call_message('c0', 'lookup_order', {'order_id': 'A-17'})
        refunds = [tool_call_message(f'c{n}', 'refund_order', {'order_id': 'A-17', 'amount_cents': amount}) for n, amount in enumerate(amounts, 1)]
        return ScriptedModel(turns=[lookup, *refunds])
    tools, effects = make_environment()
    result = run_agent_windowed('Refund order A-17.', cycle(), tools, refund_gate)
    assert result is not None, 'not answered yet: run_agent_windowed returns None'
    assert isinstance(result, RunResult), f'expected a RunResult; found {type(result)}'
    assert result.stop == Stop.NO_PROGRESS, f'expected stop no_progress; found {result.stop}'
    assert result.state.turns == 3, f'expected the run to end in turn 3 (a lookup, then two refunds refused for the same reason); found {result.state.turns} turns'
    assert effects == [], f'expected no refund; found {effects}'

@test_case(points=None, hidden=False)
def test_q3b_lets_a_retry_after_an_error_through(run_agent_windowed):
    """A lookup that timed out is tried again, the retry succeeds, and the run goes on."""
    from agentbook import ScriptedModel, Stop, ToolSpec, answer_message, make_environment
    from agentbook import refund_gate, tool_call_message
    tools, effects = make_environment()
    lookup = tools['lookup_order']
    attempts = []

    def flaky_lookup(order_id):
        attempts.append(order_id)
        if len(attempts) == 1:
            raise TimeoutError('the order service did not answer in time')
        return lookup.handler(order_id=order_id)
    tools['lookup_order'] = ToolSpec(lookup.description, lookup.schema, flaky_lookup)
    first = tool_call_message('call_1', 'lookup_order', {'order_id': 'A-17'})
    retry = tool_call_message('call_2', 'lookup_order', {'order_id': 'A-17'})
    paid = {'order_id': 'A-17', 'amount_cents': 4999}
    refund = tool_call_message('call_3', 'refund_order', paid)
    model = ScriptedModel(turns=[first, retry, refund, answer_message('Refunded.')])
    result = run_agent_windowed('Refund order A-17.', model, tools, refund_gate)
    assert result is not None, 'not answered yet: run_agent_windowed returns None'
    kinds = [o.kind for o in result.state.observations]
    assert kinds == ['error', 'result', 'result'], f'expected the timed-out lookup, its retry and the refund to run; found kinds {kinds}'
    assert result.stop == Stop.ANSWERED, f'expected stop answered; found {result.stop}'
    receipt = {'order_id': 'A-17', 'refunded_cents': 4999}
    assert effects == [receipt], f'expected one receipt, {receipt}; found {effects}'

@test_case(points=None, hidden=False)
def test_q3b_a_failing_retry_is_not_retried_forever(run_agent_windowed):
    """A lookup that keeps failing gets its one retry, then the run ends no_progress."""
    from agentbook import Limits, ScriptedModel, Stop, make_environment, refund_gate
    from agentbook import tool_call_message
    missing = tool_call_message('call_z', 'lookup_order', {'order_id': 'Z-99'})
    model = ScriptedModel(turns=[missing] * 10)
    tools, _ = make_environment()
    result = run_agent_windowed('Look up Z-99.', model, tools, refund_gate, Limits(), 4)
    assert result is not None, 'not answered yet: run_agent_windowed returns None'
    kinds = [o.kind for o in result.state.observations]
    assert result.stop == Stop.NO_PROGRESS, f'expected stop no_progress; found {result.stop}'
    assert kinds.count('error') >= 2, f'expected the first retry to be executed, two errors; found kinds {kinds}'
    assert result.state.turns <= 4, f'expected the run to end within 4 turns; found {result.state.turns}'

