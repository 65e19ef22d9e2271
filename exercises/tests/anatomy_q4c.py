from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q4c"
points = 1

@test_case(points=None, hidden=False)
def test_q4c_both_refunds_ran(double_refund, effects_q4c):
    """Each refund is within policy on its own, so the gate lets both through."""
    from agentbook import parse_tool_calls
    assert double_refund is not ..., 'not answered yet: double_refund is still ...'
    assert isinstance(double_refund, dict), f'expected double_refund to be one assistant message, a dict; found {type(double_refund)}'
    calls = parse_tool_calls(double_refund)
    names = [call.name for call in calls]
    assert names == ['refund_order', 'refund_order'], f'expected two refund_order calls in the one message; found {names}'
    ids = [call.call_id for call in calls]
    assert len(set(ids)) == 2, f'expected each proposal to have its own id; found {ids}'
    receipt = {'order_id': 'A-17', 'refunded_cents': 4999}
    assert effects_q4c == [receipt, receipt], f'expected two receipts of {receipt}; found {effects_q4c}'

