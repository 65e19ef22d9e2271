from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q6a"
points = 2

@test_case(points=None, hidden=False)
def test_q6a_one_model_call_per_round(costs_q6):
    """A criterion that is never met spends every round it is given."""
    assert [row['max_rounds'] for row in costs_q6] == [1, 2, 3, 4, 5, 6]
    assert [row['model_calls'] for row in costs_q6] == [1, 2, 3, 4, 5, 6]

@test_case(points=None, hidden=False)
def test_q6a_prompt_tokens_grow_with_the_rounds(costs_q6):
    """Every extra round is another prompt to pay for."""
    tokens = [row['prompt_tokens'] for row in costs_q6]
    assert all([a < b for a, b in zip(tokens, tokens[1:], strict=False)]), tokens

