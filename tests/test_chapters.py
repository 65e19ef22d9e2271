"""The stored chapter notebooks are in the state nbval and the book rely on.

nbval checks that every output is reproduced; these tests check what it cannot see: that
nothing is exempted from its comparison without a reason, and that the stored files carry
nothing that differs between machines.
"""

import re
from pathlib import Path

import nbformat
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((REPO_ROOT / "chapters").glob("*.ipynb"))
SKIP_TAGS = {"nbval-skip", "skip-execution"}
# Markers that would make nbval skip a cell or ignore its output.
NBVAL_MARKERS = re.compile(r"#\s*NBVAL_\w+|nbval-(ignore-output|check-output|raises-exception)")
MACHINE_SPECIFIC = {
    "a memory address": re.compile(r"\b0x[0-9a-fA-F]{6,}\b"),
    "an absolute path": re.compile(r"(/home/|/tmp/|/work/|/Users/|[A-Z]:\\\\)"),
}


def code_cells(path: Path) -> list[nbformat.NotebookNode]:
    notebook = nbformat.read(path, as_version=4)
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def output_texts(cell: nbformat.NotebookNode) -> list[str]:
    texts = []
    for output in cell.outputs:
        if output.output_type == "stream":
            texts.append(output.text)
        for mime, data in output.get("data", {}).items():
            if mime.startswith("text/"):
                texts.append(data)
    return texts


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_only_the_unexecuted_live_cell_escapes_nbval(path: Path) -> None:
    for cell in code_cells(path):
        tags = set(cell.metadata.get("tags", []))
        shown_not_run = cell.source.startswith("#| eval: false")
        assert (tags & SKIP_TAGS == SKIP_TAGS) == shown_not_run, cell.id
        assert tags <= SKIP_TAGS, f"{cell.id}: unexpected tags {tags - SKIP_TAGS}"
        assert not NBVAL_MARKERS.search(cell.source), f"{cell.id} exempts its output"
        if shown_not_run:
            assert cell.outputs == [] and cell.execution_count is None


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_stored_notebook_keeps_only_stable_metadata_and_ordered_counts(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    assert set(notebook.metadata) == {"kernelspec"}
    counts = [cell.execution_count for cell in code_cells(path)
              if cell.execution_count is not None]
    assert counts == list(range(1, len(counts) + 1))
    for cell in notebook.cells:
        assert set(cell.metadata) <= {"tags"}, cell.id


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_outputs_hold_no_errors_stderr_or_machine_specific_text(path: Path) -> None:
    for cell in code_cells(path):
        for output in cell.outputs:
            assert output.output_type != "error", cell.id
            assert output.get("name") != "stderr", cell.id
        for text in output_texts(cell):
            for what, pattern in MACHINE_SPECIFIC.items():
                assert not pattern.search(text), f"{cell.id} prints {what}"
