from otter.test_files import test_case

OK_FORMAT = False

name = "durable_q2a"
points = 2

@test_case(points=None, hidden=False)
def test_q2a_a_recent_decision_passes(fresh):
    """A decision a minute old, under an hour's limit, comes back unchanged."""
    from agentbook import ApprovalDecision
    decision = ApprovalDecision('call_2', 'd' * 64, True, 'maria', 'approved')
    kept = fresh([decision], {'call_2': 1000.0}, 1060.0, 3600.0)
    assert kept is not None, 'not answered yet: fresh returns None'
    assert kept == [decision], f'expected the decisions back unchanged; found {kept!r}'

@test_case(points=None, hidden=False)
def test_q2a_a_stale_decision_is_refused(fresh):
    """A decision two hours old, under an hour's limit, raises ValueError."""
    from agentbook import ApprovalDecision
    decision = ApprovalDecision('call_2', 'd' * 64, True, 'maria', 'approved')
    try:
        kept = fresh([decision], {'call_2': 1000.0}, 1000.0 + 7200.0, 3600.0)
    except ValueError:
        return
    assert kept is not None, 'not answered yet: fresh returns None'
    raise AssertionError(f'expected a ValueError for a decision two hours old under a one-hour limit; found it returned {kept!r}')

@test_case(points=None, hidden=False)
def test_q2a_exactly_max_age_is_still_fresh(fresh):
    """A decision exactly max_age seconds old is at most max_age old: it passes."""
    from agentbook import ApprovalDecision
    decision = ApprovalDecision('call_2', 'd' * 64, True, 'maria', 'approved')
    try:
        kept = fresh([decision], {'call_2': 1000.0}, 1000.0 + 3600.0, 3600.0)
    except ValueError as refusal:
        raise AssertionError(f'expected a decision exactly max_age old to pass; found ValueError: {refusal}') from None
    assert kept is not None, 'not answered yet: fresh returns None'
    assert kept == [decision], f'expected the decisions back unchanged; found {kept!r}'

