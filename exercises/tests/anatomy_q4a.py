from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q4a"
points = 1

@test_case(points=None, hidden=False)
def test_q4a_one_message_two_reads(both_reads):
    """One assistant message, two proposals with their own ids."""
    from agentbook import parse_tool_calls
    calls = parse_tool_calls(both_reads)
    assert sorted([call.name for call in calls]) == ['lookup_order', 'read_policy']
    assert len({call.call_id for call in calls}) == 2, 'each proposal needs its own id'

@test_case(points=None, hidden=False)
def test_q4a_both_observations_and_every_invariant(result_q4, effects_q4):
    """Both reads ran, and check_run finds nothing wrong."""
    from agentbook import Limits, check_run
    kinds = [observation.kind for observation in result_q4.state.observations]
    assert kinds == ['result', 'result'], kinds
    assert all(check_run(result_q4, effects_q4, Limits()).values())

