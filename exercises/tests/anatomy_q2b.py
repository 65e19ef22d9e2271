from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q2b"
points = 2

@test_case(points=None, hidden=False)
def test_q2b_kinds(observations_q2, effects_q2):
    """Two malformed proposals and one refused by policy; none of them moves money."""
    kinds = [observation.kind for observation in observations_q2]
    assert kinds == ['invalid', 'invalid', 'denied'], kinds
    assert effects_q2 == [], effects_q2

