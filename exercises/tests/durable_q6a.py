from otter.test_files import test_case

OK_FORMAT = False

name = "durable_q6a"
points = 2

@test_case(points=None, hidden=False)
def test_q6a_the_gated_run_has_one_denial(refusals, gated_q6):
    """The over-reaching model was refused once, then refunded what was paid."""
    assert callable(refusals), 'refusals is not defined: run the cell that defines it and fix the error it shows'
    found = refusals(gated_q6)
    assert found is not None, 'not answered yet: refusals returns None'
    assert found == {'denied': 1}, f"expected {{'denied': 1}}; found {found!r}"

@test_case(points=None, hidden=False)
def test_q6a_only_tool_spans_count(refusals, stubborn_q6):
    """Two denied tool calls; the agent span's no_progress error is not a tool call."""
    assert callable(refusals), 'refusals is not defined: run the cell that defines it and fix the error it shows'
    found = refusals(stubborn_q6)
    assert found is not None, 'not answered yet: refusals returns None'
    assert found == {'denied': 2}, f"expected {{'denied': 2}}, counting execute_tool spans only; found {found!r}"

