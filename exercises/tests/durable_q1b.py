from otter.test_files import test_case

OK_FORMAT = False

name = "durable_q1b"
points = 2

@test_case(points=None, hidden=False)
def test_q1b_the_run_paused(paused_q1):
    """paused_q1 is the PausedRun that run_with_approvals returned."""
    from agentbook import PausedRun
    assert paused_q1 is not ..., 'not answered yet: replace the ... with run_with_approvals'
    assert isinstance(paused_q1, PausedRun), f'expected paused_q1 to be a PausedRun: one call needs a person; found {type(paused_q1).__name__}'
    waiting = [request.call_id for request in paused_q1.requests]
    assert waiting == ['b'], f'expected only call b (8000 cents) to wait; found {waiting}'

@test_case(points=None, hidden=False)
def test_q1b_effects_q1_is_this_runs_desk(paused_q1, effects_q1):
    """The receipts in effects_q1 are the ones this run produced."""
    import json
    assert paused_q1 is not ..., 'not answered yet: replace the ... with run_with_approvals'
    settled = getattr(paused_q1, 'settled', None)
    state = getattr(paused_q1, 'state', None)
    seen = settled if settled is not None else getattr(state, 'observations', [])
    produced = sorted([json.dumps(o.content, sort_keys=True) for o in seen if o and o.ok and isinstance(o.content, dict) and ('refunded_cents' in o.content)])
    logged = sorted([json.dumps(entry, sort_keys=True) for entry in effects_q1])
    assert logged == produced, f"expected effects_q1 to hold exactly this run's receipts {produced}; found {logged}: give run_with_approvals tools_q1, the desk whose effect log is effects_q1"

