from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q3b"
points = 3

@test_case(points=None, hidden=False)
def test_q3b_ends_the_alternation(run_agent_windowed, alternating_model):
    """The alternating model is stopped with no_progress, and no money moves."""
    from agentbook import Stop, make_environment, refund_gate
    tools, effects = make_environment()
    result = run_agent_windowed('Refund order A-17.', alternating_model(), tools, refund_gate)
    assert result.stop == Stop.NO_PROGRESS, f'stop={result.stop}'
    assert effects == []

@test_case(points=None, hidden=False)
def test_q3b_lets_a_retry_after_an_error_through(run_agent_windowed):
    """A lookup that timed out is tried again, the retry succeeds, and the run goes on."""
    from agentbook import ScriptedModel, Stop, ToolSpec, answer_message, make_environment
    from agentbook import refund_gate, tool_call_message
    tools, effects = make_environment()
    lookup = tools['lookup_order']
    attempts = []

    def flaky_lookup(order_id):
        attempts.append(order_id)
        if len(attempts) == 1:
            raise TimeoutError('the order service did not answer in time')
        return lookup.handler(order_id=order_id)
    tools['lookup_order'] = ToolSpec(lookup.description, lookup.schema, flaky_lookup)
    first = tool_call_message('call_1', 'lookup_order', {'order_id': 'A-17'})
    retry = tool_call_message('call_2', 'lookup_order', {'order_id': 'A-17'})
    paid = {'order_id': 'A-17', 'amount_cents': 4999}
    refund = tool_call_message('call_3', 'refund_order', paid)
    model = ScriptedModel(turns=[first, retry, refund, answer_message('Refunded.')])
    result = run_agent_windowed('Refund order A-17.', model, tools, refund_gate)
    kinds = [o.kind for o in result.state.observations]
    assert kinds == ['error', 'result', 'result'], kinds
    assert result.stop == Stop.ANSWERED, f'stop={result.stop}'
    assert effects == [{'order_id': 'A-17', 'refunded_cents': 4999}]

@test_case(points=None, hidden=False)
def test_q3b_a_failing_retry_is_not_retried_forever(run_agent_windowed):
    """A lookup that keeps failing gets its one retry, then the run ends no_progress."""
    from agentbook import Limits, ScriptedModel, Stop, make_environment, refund_gate
    from agentbook import tool_call_message
    missing = tool_call_message('call_z', 'lookup_order', {'order_id': 'Z-99'})
    model = ScriptedModel(turns=[missing] * 10)
    tools, _ = make_environment()
    result = run_agent_windowed('Look up Z-99.', model, tools, refund_gate, Limits(), 4)
    kinds = [o.kind for o in result.state.observations]
    assert result.stop == Stop.NO_PROGRESS, f'stop={result.stop}'
    assert kinds.count('error') >= 2, 'the first retry must be executed'
    assert result.state.turns <= 4

