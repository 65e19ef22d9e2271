from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q7b"
points = 2

@test_case(points=None, hidden=False)
def test_q7b_reads_the_limit_at_call_time(make_config_gate):
    """Changing the configuration changes the gate's next decision."""
    from agentbook import ToolCall
    config = {'auto_refund_limit_cents': 5000}
    gate = make_config_gate(config)
    probe = ToolCall('g', 'refund_order', {'order_id': 'A-17', 'amount_cents': 5500})
    assert not gate(probe)[0], '5500 cents is over a limit of 5000'
    config['auto_refund_limit_cents'] = 6000
    assert gate(probe)[0], 'after raising the limit to 6000 the same call is allowed'

@test_case(points=None, hidden=False)
def test_q7b_agrees_with_refund_gate_at_5000(make_config_gate):
    """With the chapter's limit configured, it decides like refund_gate."""
    from agentbook import ToolCall, refund_gate
    gate = make_config_gate({'auto_refund_limit_cents': 5000})
    for amount in (1, 4999, 5000, 5001, 9999, 0, -100, True, '5000'):
        call = ToolCall('g', 'refund_order', {'order_id': 'A-17', 'amount_cents': amount})
        assert gate(call)[0] == refund_gate(call)[0], f'amount_cents={amount!r}'
    assert gate(ToolCall('g', 'lookup_order', {'order_id': 'A-17'}))[0]

