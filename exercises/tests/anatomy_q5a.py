from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q5a"
points = 1

@test_case(points=None, hidden=False)
def test_q5a_answers_without_acting(result_q5, effects_q5):
    """The run ends answered after one turn, no tool ran, and verification fails."""
    from agentbook import Stop, verify_refund
    assert result_q5 is not None, 'not answered yet: result_q5 is not defined, because receipt_liar() gave no model'
    assert result_q5.stop == Stop.ANSWERED, f'expected stop answered; found {result_q5.stop}'
    assert result_q5.state.turns == 1, f'expected the model to answer at once, in 1 turn; found {result_q5.state.turns}'
    assert result_q5.state.observations == [], f'expected no tool call at all; found {result_q5.state.observations}'
    answer = result_q5.answer
    assert isinstance(answer, str) and answer.strip(), f'expected a claim in words; found {answer!r}'
    assert effects_q5 == [], f'expected an empty effect log; found {effects_q5}'
    assert not verify_refund(effects_q5, 'A-17', 4999), "expected verify_refund(effects_q5, 'A-17', 4999) to be False; found True"

@test_case(points=None, hidden=False)
def test_q5a_every_call_returns_a_fresh_model(receipt_liar):
    """A ScriptedModel uses up its script as it plays, so each call must build a new one."""
    first = receipt_liar()
    assert first is not None, 'not answered yet: receipt_liar() returns None'
    assert first is not receipt_liar(), 'expected a new model from every call; found the same object twice: build the ScriptedModel inside the function'

