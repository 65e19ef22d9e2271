from otter.test_files import test_case

OK_FORMAT = False

name = "durable_q2a"
points = 2

@test_case(points=0.2, hidden=False)
def test_q2a_a_recent_decision_passes(fresh):
    """A decision a minute old, under an hour's limit, comes back unchanged."""
    assert callable(fresh), 'fresh is not defined: run the cell that defines it and fix the error it shows'
    from agentbook import ApprovalDecision
    decision = ApprovalDecision('call_2', 'd' * 64, True, 'maria', 'approved')
    kept = fresh([decision], {'call_2': 1000.0}, 1060.0, 3600.0)
    assert kept is not None, 'not answered yet: fresh returns None'
    assert kept == [decision], f'expected the decisions back unchanged; found {kept!r}'

@test_case(points=0.2, hidden=False)
def test_q2a_a_stale_decision_is_refused(fresh):
    """A decision two hours old, under an hour's limit, raises ValueError."""
    assert callable(fresh), 'fresh is not defined: run the cell that defines it and fix the error it shows'
    from agentbook import ApprovalDecision
    decision = ApprovalDecision('call_2', 'd' * 64, True, 'maria', 'approved')
    try:
        kept = fresh([decision], {'call_2': 1000.0}, 1000.0 + 7200.0, 3600.0)
    except ValueError:
        return
    assert kept is not None, 'not answered yet: fresh returns None'
    raise AssertionError(f'expected a ValueError for a decision two hours old under a one-hour limit; found it returned {kept!r}')

@test_case(points=0.1, hidden=False)
def test_q2a_exactly_max_age_is_still_fresh(fresh):
    """A decision exactly max_age seconds old is at most max_age old: it passes."""
    assert callable(fresh), 'fresh is not defined: run the cell that defines it and fix the error it shows'
    from agentbook import ApprovalDecision
    decision = ApprovalDecision('call_2', 'd' * 64, True, 'maria', 'approved')
    try:
        kept = fresh([decision], {'call_2': 1000.0}, 1000.0 + 3600.0, 3600.0)
    except ValueError as refusal:
        raise AssertionError(f'expected a decision exactly max_age old to pass; found ValueError: {refusal}') from None
    assert kept is not None, 'not answered yet: fresh returns None'
    assert kept == [decision], f'expected the decisions back unchanged; found {kept!r}'

@test_case(points=0.5, hidden=False)
def test_q2a_every_decision_is_checked(fresh):
    """A fresh decision first does not let a stale one after it through."""
    from agentbook import ApprovalDecision
    assert callable(fresh), 'fresh is not defined: run the cell that defines it and fix the error it shows'
    new = ApprovalDecision('call_1', 'd' * 64, True, 'maria', 'approved')
    old = ApprovalDecision('call_2', 'e' * 64, True, 'maria', 'approved')
    try:
        kept = fresh([new, old], {'call_1': 1000.0, 'call_2': 0.0}, 1060.0, 100.0)
    except ValueError:
        return
    assert kept is not None, 'not answered yet: fresh returns None'
    raise AssertionError(f'expected a ValueError: call_2 is 1060 s old under a 100 s limit, though call_1 before it is fresh; found it returned {kept!r}')

@test_case(points=0.5, hidden=False)
def test_q2a_a_decision_without_a_time_is_not_fresh(fresh):
    """No recorded time means no way to know its age: ValueError."""
    from agentbook import ApprovalDecision
    assert callable(fresh), 'fresh is not defined: run the cell that defines it and fix the error it shows'
    decision = ApprovalDecision('call_2', 'd' * 64, True, 'maria', 'approved')
    try:
        kept = fresh([decision], {}, 1000.0, 3600.0)
    except ValueError:
        return
    assert kept is not None, 'not answered yet: fresh returns None'
    raise AssertionError(f'expected a ValueError for a decision with no recorded time; found it returned {kept!r}')

