from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q3a"
points = 1

@test_case(points=None, hidden=False)
def test_q3a_refunds_cycle_through_three_amounts(cycling_model):
    """Given room to keep going, the model proposes 9999, 8000, 6000, 9999, ... in that order."""
    from agentbook import Limits, make_environment, parse_tool_calls, refund_gate, run_agent
    model = cycling_model()
    assert model is not None, 'not answered yet: cycling_model() returns None'
    assert model is not cycling_model(), 'expected a fresh model from every call; found the same object twice'
    tools, effects = make_environment()
    patient = Limits(max_turns=9, repeated_denials=99)
    result = run_agent('Refund order A-17.', model, tools, refund_gate, patient)
    proposed = [c for m in result.state.messages for c in parse_tool_calls(m)]
    amounts = [c.arguments.get('amount_cents') for c in proposed if c.name == 'refund_order']
    expected = [9999, 8000, 6000] * 3
    assert len(amounts) >= 6 and amounts == expected[:len(amounts)], f'expected refunds of {expected[:6]} and so on, one after each denial; found {amounts}'
    assert effects == [], f'expected no refund to get past the gate; found {effects}'

