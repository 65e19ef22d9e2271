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
    assert gate is not None, 'not answered yet: make_config_gate returns None'
    probe = ToolCall('g', 'refund_order', {'order_id': 'A-17', 'amount_cents': 5500})
    assert not gate(probe)[0], 'expected 5500 cents to be denied under a limit of 5000; it was allowed'
    config['auto_refund_limit_cents'] = 6000
    assert gate(probe)[0], 'expected the same call to be allowed once the limit is raised to 6000; it was denied: read the limit when the gate is called, not when it is made'

@test_case(points=None, hidden=False)
def test_q7b_agrees_with_refund_gate_at_5000(make_config_gate):
    """With the chapter's limit configured, it decides like refund_gate."""
    from agentbook import ToolCall, refund_gate
    gate = make_config_gate({'auto_refund_limit_cents': 5000})
    assert gate is not None, 'not answered yet: make_config_gate returns None'
    for amount in (1, 4999, 5000, 5001, 9999, 0, -100, True, '5000'):
        call = ToolCall('g', 'refund_order', {'order_id': 'A-17', 'amount_cents': amount})
        expected, found = (refund_gate(call)[0], gate(call)[0])
        assert found == expected, f'amount_cents={amount!r}: expected allowed={expected}, as refund_gate decides; found allowed={found}'
    assert gate(ToolCall('g', 'lookup_order', {'order_id': 'A-17'}))[0], 'expected a lookup to be allowed; it was denied'

@test_case(points=None, hidden=False)
def test_q7b_no_limit_configured_means_no_refund(make_config_gate):
    """With the key missing, every refund is denied and lookups are still allowed."""
    from agentbook import ToolCall
    gate = make_config_gate({})
    assert gate is not None, 'not answered yet: make_config_gate returns None'
    refund = ToolCall('g', 'refund_order', {'order_id': 'A-17', 'amount_cents': 100})
    assert not gate(refund)[0], 'expected a refund of 100 cents to be denied when no limit is configured; it was allowed: a broken configuration must never widen authority'
    assert gate(ToolCall('g', 'lookup_order', {'order_id': 'A-17'}))[0], 'expected a lookup to be allowed whatever the configuration; it was denied'

