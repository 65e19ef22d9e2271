"""The chapter's figures keep their legends clear of the data they describe.

Matplotlib writes every artist of an SVG as a group with an id: an axes is `axes_N`, its
legend `legend_N`, each plotted line `line2d_N` (vertices in its path, markers as `use`
elements) and each bar `patch_N`. The check reads those coordinates from the committed
figures, so it needs neither a browser nor a render; a figure drawn here with its legend on
top of a line proves that it notices.
"""

import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from io import StringIO
from itertools import pairwise
from pathlib import Path

import pytest
from matplotlib.figure import Figure

FIGURES = Path(__file__).resolve().parent.parent / "figures"
SVG = "{http://www.w3.org/2000/svg}"
MARKER_RADIUS = 3.0  # the chapter's markers are about six points across
Point = tuple[float, float]
Box = tuple[float, float, float, float]  # left, top, right, bottom


def path_points(element: ElementTree.Element) -> list[Point]:
    numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", element.get("d", ""))]
    return list(zip(numbers[::2], numbers[1::2], strict=False))


def box_of(points: list[Point]) -> Box:
    xs, ys = [x for x, _ in points], [y for _, y in points]
    return min(xs), min(ys), max(xs), max(ys)


def inside(point: Point, box: Box, margin: float = 0.0) -> bool:
    x, y = point
    return box[0] - margin <= x <= box[2] + margin and box[1] - margin <= y <= box[3] + margin


def segment_crosses(start: Point, end: Point, box: Box, steps: int = 50) -> bool:
    return any(inside((start[0] + (end[0] - start[0]) * k / steps,
                       start[1] + (end[1] - start[1]) * k / steps), box)
               for k in range(steps + 1))


def children(group: ElementTree.Element, prefix: str) -> list[ElementTree.Element]:
    return [child for child in group if child.get("id", "").startswith(prefix)]


def overlaps_in(axes: ElementTree.Element) -> Iterator[str]:
    """What the legend of one axes covers: line vertices, markers, segments or bars."""
    for legend in children(axes, "legend_"):
        frame = box_of(path_points(next(legend.iter(f"{SVG}path"))))
        for line in children(axes, "line2d_"):
            for path in line.iter(f"{SVG}path"):
                if path.get("id"):  # a marker's shape, drawn wherever a `use` points
                    continue
                points = path_points(path)
                if any(segment_crosses(a, b, frame) for a, b in pairwise(points)):
                    yield f"{line.get('id')} runs under {legend.get('id')}"
            for use in line.iter(f"{SVG}use"):
                point = (float(use.get("x", "nan")), float(use.get("y", "nan")))
                if inside(point, frame, MARKER_RADIUS):
                    yield f"a marker of {line.get('id')} is under {legend.get('id')}"
        for bar in children(axes, "patch_")[1:]:  # the first is the axes' background
            points = [point for path in bar.iter(f"{SVG}path") for point in path_points(path)]
            if len(points) >= 4:  # two points are a spine, not a bar
                left, top, right, bottom = box_of(points)
                if left < frame[2] and frame[0] < right and top < frame[3] and frame[1] < bottom:
                    yield f"{bar.get('id')} is under {legend.get('id')}"


def legend_overlaps(svg: str) -> list[str]:
    root = ElementTree.fromstring(svg)
    return [overlap for axes in root.iter(f"{SVG}g") if axes.get("id", "").startswith("axes_")
            for overlap in overlaps_in(axes)]


def drawn(legend_location: str, kind: str = "line") -> str:
    """A small chart, a rising line or two bars, whose legend sits where it is told."""
    figure = Figure(figsize=(4, 3))
    axes = figure.subplots()
    if kind == "line":
        axes.plot(range(10), range(10), marker="o", label="rising")
    else:
        axes.bar([0, 1], [10, 1], label="calls")
    axes.legend(loc=legend_location)
    buffer = StringIO()
    figure.savefig(buffer, format="svg")
    return buffer.getvalue()


@pytest.mark.parametrize("figure", sorted(path.name for path in FIGURES.glob("*.svg")))
def test_no_legend_covers_the_data(figure: str) -> None:
    assert legend_overlaps((FIGURES / figure).read_text(encoding="utf-8")) == []


def test_the_check_sees_a_legend_over_a_line_or_a_bar() -> None:
    assert legend_overlaps(drawn("lower right")) == []
    assert legend_overlaps(drawn("center")) != []
    assert legend_overlaps(drawn("upper right", kind="bars")) == []
    assert legend_overlaps(drawn("upper left", kind="bars")) != []


def test_the_committed_figures_have_legends_to_check() -> None:
    legends = [figure.name for figure in FIGURES.glob("*.svg")
               if 'id="legend_' in figure.read_text(encoding="utf-8")]
    assert sorted(legends) == ["crash-refunds.svg", "pattern-costs.svg", "token-growth.svg"]
