from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q6b"
points = 1

@test_case(points=None, hidden=False)
def test_q6b_two_labeled_panels_with_data(fig_q6):
    """fig_q6 has two panels, each with something plotted and both axes labeled."""
    from matplotlib.figure import Figure
    assert isinstance(fig_q6, Figure), f'expected fig_q6 to be a matplotlib Figure; found {type(fig_q6)}'
    panels = [ax for ax in fig_q6.axes if ax.get_lines() or ax.containers or ax.collections]
    assert panels, 'not answered yet: nothing is plotted on fig_q6'
    assert len(panels) == 2, f'expected model calls and prompt tokens in two panels; found {len(panels)} with data'
    for ax in panels:
        assert ax.get_xlabel() and ax.get_ylabel(), f'expected both axes of every panel labeled; found x={ax.get_xlabel()!r}, y={ax.get_ylabel()!r}'

