from otter.test_files import test_case

OK_FORMAT = False

name = "untrusted_q1a"
points = 2

@test_case(points=None, hidden=False)
def test_q1a_own_invoice_is_read(invoice_owner, invoice_desk):
    """C-100 reads her own invoice I-1."""
    from agentbook import Principal, ToolCall, allow_all, execute_call, scope_tools
    assert invoice_owner is not ..., 'not answered yet: write invoice_owner'
    tools, owner = invoice_desk()
    assert invoice_owner('read_invoice', {'invoice_id': 'I-1'}, owner) is not None, 'not answered yet: invoice_owner returns None for an invoice'
    scoped = scope_tools(tools, Principal('C-100'), owner=lambda n, a: invoice_owner(n, a, owner))
    seen = execute_call(ToolCall('t', 'read_invoice', {'invoice_id': 'I-1'}), scoped, allow_all)
    assert seen.kind == 'result', f'expected C-100 to read I-1; found {seen.kind}: {seen.content}'

@test_case(points=None, hidden=False)
def test_q1a_others_and_unknown_refused_alike(invoice_owner, invoice_desk):
    """Another customer's invoice and an unknown one are refused, with the same reason."""
    from agentbook import Principal, ToolCall, allow_all, execute_call, scope_tools
    tools, owner = invoice_desk()
    assert invoice_owner('read_invoice', {'invoice_id': 'I-2'}, owner) is not None, 'not answered yet: invoice_owner returns None for an invoice'
    scoped = scope_tools(tools, Principal('C-100'), owner=lambda n, a: invoice_owner(n, a, owner))
    found = {}
    for invoice_id in ('I-2', 'I-404'):
        seen = execute_call(ToolCall('t', 'read_invoice', {'invoice_id': invoice_id}), scoped, allow_all)
        found[invoice_id] = (seen.kind, str(seen.content).replace(invoice_id, 'ID'))
    assert found['I-2'][0] == 'error', f"expected I-2 to be refused; found {found['I-2']}"
    assert found['I-2'] == found['I-404'], f"expected the same refusal for another customer's invoice and an unknown one; found {found}"

