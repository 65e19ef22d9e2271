from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q1b"
points = 1

@test_case(points=None, hidden=False)
def test_q1b_stops_on_the_turn_budget(result_q1):
    """Two turns and a step_limit ending: the budget ended the run, not an answer."""
    from agentbook import Stop
    assert result_q1.stop == Stop.STEP_LIMIT, f'stop={result_q1.stop}'
    assert result_q1.state.turns == 2, f'turns={result_q1.state.turns}'

@test_case(points=None, hidden=False)
def test_q1b_the_refund_still_happened(result_q1, effects_q1):
    """Both proposals were executed, so the refund's receipt is in the effect log."""
    assert len(result_q1.state.observations) == 2
    assert effects_q1 == [{'order_id': 'A-17', 'refunded_cents': 4999}], effects_q1

