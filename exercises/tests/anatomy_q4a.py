from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q4a"
points = 1

@test_case(points=None, hidden=False)
def test_q4a_one_message_two_reads(both_reads):
    """One assistant message, two proposals with their own ids."""
    from agentbook import parse_tool_calls
    assert both_reads is not ..., 'not answered yet: both_reads is still ...'
    assert isinstance(both_reads, dict), f'expected both_reads to be one assistant message, a dict; found {type(both_reads)}'
    calls = parse_tool_calls(both_reads)
    names = sorted([call.name for call in calls])
    assert names == ['lookup_order', 'read_policy'], f'expected one lookup_order and one read_policy call; found {names}'
    ids = [call.call_id for call in calls]
    assert len(set(ids)) == 2, f'expected each proposal to have its own id; found {ids}'

@test_case(points=None, hidden=False)
def test_q4a_both_observations_and_every_invariant(both_reads, result_q4, effects_q4):
    """Both reads ran, and check_run finds nothing wrong."""
    from agentbook import Limits, check_run
    assert both_reads is not ..., 'not answered yet: both_reads is still ...'
    kinds = [observation.kind for observation in result_q4.state.observations]
    assert kinds == ['result', 'result'], f'expected two successful reads; found kinds {kinds}'
    verdict = check_run(result_q4, effects_q4, Limits())
    assert all(verdict.values()), f'expected every invariant to hold; found {verdict}'

