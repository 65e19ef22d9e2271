from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q6b"
points = 1

@test_case(points=None, hidden=False)
def test_q6b_is_a_figure_with_data(fig_q6):
    """fig_q6 is a matplotlib figure with something plotted on it."""
    from matplotlib.figure import Figure
    assert isinstance(fig_q6, Figure)
    assert any([ax.get_lines() or ax.containers for ax in fig_q6.axes])

