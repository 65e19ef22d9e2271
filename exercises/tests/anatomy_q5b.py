from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q5b"
points = 2

@test_case(points=None, hidden=False)
def test_q5b_accepts_the_chapters_gated_run(looked_up_before_refund):
    """The gated run looked A-17 up before its one successful refund."""
    from agentbook import make_environment, overreaching_model, refund_gate, run_agent
    tools, effects = make_environment()
    result = run_agent('Order A-17 arrived damaged.', overreaching_model(), tools, refund_gate)
    assert effects == [{'order_id': 'A-17', 'refunded_cents': 4999}]
    assert looked_up_before_refund(result)

@test_case(points=None, hidden=False)
def test_q5b_rejects_a_refund_without_a_lookup(looked_up_before_refund, result_no_lookup):
    """Your run refunded without looking the order up, and the check says so."""
    calls = {}
    for message in result_no_lookup.state.messages:
        for entry in message.get('tool_calls') or []:
            calls[entry['id']] = entry['function']['name']
    names = [calls.get(o.call_id) for o in result_no_lookup.state.observations if o.ok]
    assert 'refund_order' in names, 'the run should contain a successful refund'
    assert 'lookup_order' not in names[:names.index('refund_order')]
    assert not looked_up_before_refund(result_no_lookup)

