from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q2b"
points = 2

@test_case(points=None, hidden=False)
def test_q2b_three_refund_proposals_on_the_wire(string_amount, bad_json, too_much):
    """Each is an assistant message proposing one refund_order call, each with its own id."""
    proposals = {'string_amount': string_amount, 'bad_json': bad_json, 'too_much': too_much}
    ids = []
    for name, message in proposals.items():
        assert message is not ..., f'not answered yet: {name} is still ...'
        assert isinstance(message, dict) and message.get('role') == 'assistant', f"expected {name} to be an assistant message, a dict with role 'assistant'; found {message!r}"
        calls = message.get('tool_calls') or []
        assert len(calls) == 1, f'expected {name} to propose one call; found {len(calls)}'
        function = calls[0].get('function') or {}
        assert function.get('name') == 'refund_order', f"expected {name} to propose refund_order; found {function.get('name')!r}"
        assert isinstance(function.get('arguments'), str), f"expected {name}'s arguments as a JSON string, as on the wire; found {type(function.get('arguments'))}"
        ids.append(calls[0].get('id'))
    assert len(set(ids)) == 3, f'expected three different call ids; found {ids}'

@test_case(points=None, hidden=False)
def test_q2b_each_proposal_carries_its_own_fault(string_amount, bad_json, too_much):
    """The amount is the text "4999"; the arguments are not JSON; the amount is 999,999 cents."""
    import json

    def arguments(message):
        assert message is not ..., 'not answered yet: a proposal is still ...'
        return message['tool_calls'][0]['function']['arguments']
    paid_as_text = json.loads(arguments(string_amount))
    assert paid_as_text == {'order_id': 'A-17', 'amount_cents': '4999'}, f"expected string_amount's arguments to be order A-17 with amount_cents the string '4999'; found {paid_as_text}"
    try:
        decoded = json.loads(arguments(bad_json))
    except ValueError:
        decoded = None
    assert decoded is None, f"expected bad_json's arguments not to decode as JSON; found {decoded!r}"
    excessive = json.loads(arguments(too_much))
    assert excessive == {'order_id': 'A-17', 'amount_cents': 999999}, f"expected too_much's arguments to be order A-17 and 999999 cents; found {excessive}"

