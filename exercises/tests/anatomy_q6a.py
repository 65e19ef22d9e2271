from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q6a"
points = 2

@test_case(points=None, hidden=False)
def test_q6a_one_model_call_per_round(costs_q6):
    """A criterion that is never met spends every round it is given."""
    assert costs_q6, 'not answered yet: costs_q6 is empty'
    rounds = [row.get('max_rounds') for row in costs_q6]
    assert rounds == [1, 2, 3, 4, 5, 6], f'expected one row per max_rounds 1 to 6; found {rounds}'
    calls = [row.get('model_calls') for row in costs_q6]
    assert calls == [1, 2, 3, 4, 5, 6], f'expected model_calls equal to max_rounds, each row measured with a fresh Meter and a fresh drafter; found {calls}'

@test_case(points=None, hidden=False)
def test_q6a_prompt_tokens_grow_with_the_rounds(costs_q6):
    """Every extra round is another prompt to pay for."""
    assert costs_q6, 'not answered yet: costs_q6 is empty'
    tokens = [row.get('prompt_tokens') for row in costs_q6]
    assert len(tokens) == 6, f'expected six measurements; found {len(tokens)}'
    assert all([isinstance(count, int) for count in tokens]), f'expected whole numbers of tokens; found {tokens}'
    assert all([a < b for a, b in zip(tokens, tokens[1:], strict=False)]), f'expected prompt_tokens to grow with every round; found {tokens}'

