from otter.test_files import test_case

OK_FORMAT = False

name = "durable_q4a"
points = 2

@test_case(points=0.3, hidden=False)
def test_q4a_the_crashed_refund_is_unsettled_and_applied(unsettled, journal_q4, lookup_q4):
    """After a crash past the effect, one key is open, and the desk has applied it."""
    assert callable(unsettled), 'unsettled is not defined: run the cell that defines it and fix the error it shows'
    found = unsettled(journal_q4, lookup_q4)
    assert found is not None, 'not answered yet: unsettled returns None'
    assert found == {'crashed/2/0/call_2': {'arguments': {'order_id': 'A-17', 'amount_cents': 4999}, 'receipt': {'order_id': 'A-17', 'refunded_cents': 4999}}}, f"expected the refund's key mapped to what lookup says of it; found {found!r}"

@test_case(points=0.2, hidden=False)
def test_q4a_a_finished_run_leaves_nothing_unsettled(unsettled):
    """A run that never crashed has an outcome for every intent."""
    assert callable(unsettled), 'unsettled is not defined: run the cell that defines it and fix the error it shows'
    import tempfile
    from pathlib import Path
    from agentbook import Journal, ScriptedModel, make_keyed_environment, refund_gate, run_durably, tool_call_message
    tools, _, lookup = make_keyed_environment()
    refund = tool_call_message('r', 'refund_order', {'order_id': 'A-17', 'amount_cents': 10})
    journal = Journal(Path(tempfile.mkdtemp()) / 'done.jsonl')
    run_durably('Refund A-17.', ScriptedModel(turns=[refund]), tools, refund_gate, journal)
    found = unsettled(journal, lookup)
    assert found is not None, 'not answered yet: unsettled returns None'
    assert found == {}, f'expected no unsettled intent in a finished run; found {found!r}'

@test_case(points=0.75, hidden=False)
def test_q4a_every_open_intent_counts_not_only_the_last_record(unsettled):
    """A journal with two intents left open, and other records after them."""
    import tempfile
    from pathlib import Path
    from agentbook import Journal
    assert callable(unsettled), 'unsettled is not defined: run the cell that defines it and fix the error it shows'
    journal = Journal(Path(tempfile.mkdtemp()) / 'two-open.jsonl')
    for record in ({'kind': 'intent', 'key': 'k1'}, {'kind': 'outcome', 'key': 'k1'}, {'kind': 'intent', 'key': 'k2'}, {'kind': 'intent', 'key': 'k3'}, {'kind': 'state'}):
        journal.append(record)
    found = unsettled(journal, lambda key: f'asked about {key}')
    assert found is not None, 'not answered yet: unsettled returns None'
    assert found == {'k2': 'asked about k2', 'k3': 'asked about k3'}, f'expected both intents without an outcome, k2 and k3, wherever they are in the journal; found {found!r}'

