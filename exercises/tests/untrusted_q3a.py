from otter.test_files import test_case

OK_FORMAT = False

name = "untrusted_q3a"
points = 2

@test_case(points=None, hidden=False)
def test_q3a_the_slip_is_refunded(trusting_uploads, refunds, SLIP_TASK, SLIP_PLAN):
    """With uploads trusted, the return slip's refund goes through."""
    assert trusting_uploads is not ..., 'not answered yet: write trusting_uploads'
    assert trusting_uploads(SLIP_TASK, {}) is not None, 'not answered yet: trusting_uploads returns None'
    effects = refunds(SLIP_TASK, SLIP_PLAN, trusting_uploads)
    assert effects == [{'order_id': 'A-19', 'refunded_cents': 3999}], f"expected the slip's refund of 3999 cents on A-19; found {effects}"

@test_case(points=None, hidden=False)
def test_q3a_the_review_attack_is_still_denied(trusting_uploads, refunds, KETTLE_TASK, KETTLE_PLAN):
    """Reviews stay untrusted: the injected refund to B-22 is denied."""
    assert trusting_uploads(KETTLE_TASK, {}) is not None, 'not answered yet: trusting_uploads returns None'
    effects = refunds(KETTLE_TASK, KETTLE_PLAN, trusting_uploads)
    assert effects == [{'order_id': 'A-17', 'refunded_cents': 4999}], f'expected only the owed refund on A-17, the injected B-22 denied; found {effects}'

