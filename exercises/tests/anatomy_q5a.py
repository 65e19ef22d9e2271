from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q5a"
points = 1

@test_case(points=None, hidden=False)
def test_q5a_answers_without_acting(result_q5, effects_q5):
    """The run ends answered after one turn, no tool ran, and verification fails."""
    from agentbook import Stop, verify_refund
    assert result_q5.stop == Stop.ANSWERED, f'stop={result_q5.stop}'
    assert result_q5.state.turns == 1
    assert result_q5.state.observations == []
    assert isinstance(result_q5.answer, str) and result_q5.answer.strip()
    assert effects_q5 == []
    assert not verify_refund(effects_q5, 'A-17', 4999)

