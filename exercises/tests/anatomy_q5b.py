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
    verdict = looked_up_before_refund(result)
    assert verdict is not None, 'not answered yet: looked_up_before_refund returns None'
    assert verdict is True, f"expected True for the chapter's gated run (lookup, denied refund, refund); found {verdict!r}"

@test_case(points=None, hidden=False)
def test_q5b_rejects_a_refund_without_a_lookup(looked_up_before_refund, result_no_lookup):
    """Your run refunded without looking the order up, and the check says so."""
    from agentbook import RunResult
    assert result_no_lookup is not ..., 'not answered yet: result_no_lookup is still ...'
    assert isinstance(result_no_lookup, RunResult), f'expected result_no_lookup to be a RunResult; found {type(result_no_lookup)}'
    calls = {}
    for message in result_no_lookup.state.messages:
        for entry in message.get('tool_calls') or []:
            calls[entry['id']] = entry['function']['name']
    names = [calls.get(o.call_id) for o in result_no_lookup.state.observations if o.ok]
    assert 'refund_order' in names, f'expected a successful refund in result_no_lookup; found successful calls {names}'
    before = names[:names.index('refund_order')]
    assert 'lookup_order' not in before, f'expected no lookup before the refund; found successful calls {names}'
    verdict = looked_up_before_refund(result_no_lookup)
    assert verdict is False, f'expected False for a refund without a lookup; found {verdict!r}'

@test_case(points=None, hidden=False)
def test_q5b_a_lookup_after_the_refund_is_too_late(looked_up_before_refund):
    """Refund first and look up afterward: the evidence came too late, so the check fails."""
    from agentbook import ScriptedModel, allow_all, answer_message, make_environment
    from agentbook import run_agent, tool_call_message
    refund = tool_call_message('a', 'refund_order', {'order_id': 'A-17', 'amount_cents': 4999})
    lookup = tool_call_message('b', 'lookup_order', {'order_id': 'A-17'})
    tools, _ = make_environment()
    model = ScriptedModel(turns=[refund, lookup, answer_message('Done.')])
    verdict = looked_up_before_refund(run_agent('Order A-17.', model, tools, allow_all))
    assert verdict is not None, 'not answered yet: looked_up_before_refund returns None'
    assert verdict is False, f'expected False when the only lookup comes after the refund; found {verdict!r}'

