from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q4b"
points = 2

@test_case(points=None, hidden=False)
def test_q4b_reversed_transcript_still_passes(reversed_q4, result_q4, effects_q4):
    """The tool messages trade places and check_run still passes: it matches by id."""
    from agentbook import Limits, check_run

    def tool_ids(result):
        return [m['tool_call_id'] for m in result.state.messages if m.get('role') == 'tool']
    assert len(tool_ids(result_q4)) == 2
    assert tool_ids(reversed_q4) == tool_ids(result_q4)[::-1]
    assert all(check_run(reversed_q4, effects_q4, Limits()).values())

@test_case(points=None, hidden=False)
def test_q4b_position_pairs_the_wrong_results(pair_by_position, reversed_q4, result_q4):
    """By position the pairs are right as run, and every one is wrong once reversed."""
    straight = pair_by_position(result_q4.state.messages)
    crossed = pair_by_position(reversed_q4.state.messages)
    assert len(straight) == len(crossed) == 2
    assert all([proposed == answered for proposed, answered in straight]), straight
    assert all([proposed != answered for proposed, answered in crossed]), crossed

