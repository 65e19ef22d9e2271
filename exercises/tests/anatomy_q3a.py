from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q3a"
points = 1

@test_case(points=None, hidden=False)
def test_q3a_refunds_alternate(alternating_model):
    """Given room to keep going, the model keeps proposing 9998 and 9999 in turn."""
    from agentbook import Limits, make_environment, parse_tool_calls, refund_gate, run_agent
    tools, effects = make_environment()
    patient = Limits(max_turns=8, repeated_denials=99)
    result = run_agent('Refund order A-17.', alternating_model(), tools, refund_gate, patient)
    proposed = [c for m in result.state.messages for c in parse_tool_calls(m)]
    refunds = [c for c in proposed if c.name == 'refund_order']
    amounts = [c.arguments['amount_cents'] for c in refunds]
    assert len(amounts) >= 4, amounts
    assert set(amounts) == {9998, 9999}, amounts
    assert all([a != b for a, b in zip(amounts, amounts[1:], strict=False)]), amounts
    assert effects == []

