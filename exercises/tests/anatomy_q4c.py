from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q4c"
points = 1

@test_case(points=None, hidden=False)
def test_q4c_both_refunds_ran(double_refund, effects_q4c):
    """Each refund is within policy on its own, so the gate lets both through."""
    from agentbook import parse_tool_calls
    calls = parse_tool_calls(double_refund)
    assert [call.name for call in calls] == ['refund_order', 'refund_order']
    assert len({call.call_id for call in calls}) == 2, 'each proposal needs its own id'
    receipt = {'order_id': 'A-17', 'refunded_cents': 4999}
    assert effects_q4c == [receipt, receipt], effects_q4c

