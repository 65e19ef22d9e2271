from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q3b"
points = 3

@test_case(points=None, hidden=False)
def test_q3b_the_second_refusal_for_one_reason_ends_the_run(run_agent_windowed):
    """Different amounts refused for the same reason: the second refusal ends the run."""
    from agentbook import RunResult, ScriptedModel, Stop, make_environment, refund_gate
    from agentbook import tool_call_message

    def cycle():
        amounts = [9999, 8000, 6000] * 4
        lookup = tool_call_message('c0', 'lookup_order', {'order_id': 'A-17'})
        refunds = [tool_call_message(f'c{n}', 'refund_order', {'order_id': 'A-17', 'amount_cents': amount}) for n, amount in enumerate(amounts, 1)]
        return ScriptedModel(turns=[lookup, *refunds])
    tools, effects = make_environment()
    result = run_agent_windowed('Refund order A-17.', cycle(), tools, refund_gate)
    assert result is not None, 'not answered yet: run_agent_windowed returns None'
    assert isinstance(result, RunResult), f'expected a RunResult; found {type(result)}'
    assert result.stop == Stop.NO_PROGRESS, f'expected stop no_progress; found {result.stop}'
    assert result.state.turns == 3, f'expected the run to end in turn 3 (a lookup, then two refunds refused for the same reason); found {result.state.turns} turns'
    assert effects == [], f'expected no refund; found {effects}'

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
    assert result is not None, 'not answered yet: run_agent_windowed returns None'
    kinds = [o.kind for o in result.state.observations]
    assert kinds == ['error', 'result', 'result'], f'expected the timed-out lookup, its retry and the refund to run; found kinds {kinds}'
    assert result.stop == Stop.ANSWERED, f'expected stop answered; found {result.stop}'
    receipt = {'order_id': 'A-17', 'refunded_cents': 4999}
    assert effects == [receipt], f'expected one receipt, {receipt}; found {effects}'

@test_case(points=None, hidden=False)
def test_q3b_a_failing_retry_is_not_retried_forever(run_agent_windowed):
    """A lookup that keeps failing gets its one retry, then the run ends no_progress."""
    from agentbook import Limits, ScriptedModel, Stop, make_environment, refund_gate
    from agentbook import tool_call_message
    missing = tool_call_message('call_z', 'lookup_order', {'order_id': 'Z-99'})
    model = ScriptedModel(turns=[missing] * 10)
    tools, _ = make_environment()
    result = run_agent_windowed('Look up Z-99.', model, tools, refund_gate, Limits(), 4)
    assert result is not None, 'not answered yet: run_agent_windowed returns None'
    kinds = [o.kind for o in result.state.observations]
    assert result.stop == Stop.NO_PROGRESS, f'expected stop no_progress; found {result.stop}'
    assert kinds.count('error') >= 2, f'expected the first retry to be executed, two errors; found kinds {kinds}'
    assert result.state.turns <= 4, f'expected the run to end within 4 turns; found {result.state.turns}'

