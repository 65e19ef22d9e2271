"""The stored chapter notebooks are in the state nbval and the book rely on.

nbval checks that every output is reproduced; these tests check what it cannot see: that
nothing is exempted from its comparison without a reason, and that the stored files carry
nothing that differs between machines.
"""

import ast
import re
from pathlib import Path

import nbformat
import pytest

from scripts.build import save

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


# The chapter's shape as a reader meets it: short cells, prose within its budget, nothing
# used before it is built, and the finished run shown first.
ANATOMY = REPO_ROOT / "chapters" / "01_anatomy.ipynb"
DURABLE = REPO_ROOT / "chapters" / "02_durable.ipynb"
UNTRUSTED = REPO_ROOT / "chapters" / "03_untrusted.ipynb"
PROTOCOLS = REPO_ROOT / "chapters" / "04_protocols.ipynb"
SHAPED = [ANATOMY, DURABLE, UNTRUSTED, PROTOCOLS]
MAX_CODE_CELL_LINES = 40
# Each chapter's budget for its markdown before its Exercises heading.
MAX_PROSE_WORDS = {ANATOMY: 8500, DURABLE: 7001, UNTRUSTED: 6500, PROTOCOLS: 9000}
EXERCISES_HEADING = "## Exercises"


def cells_of(path: Path) -> list[nbformat.NotebookNode]:
    return list(nbformat.read(path, as_version=4).cells)


def prose_words(path: Path) -> int:
    """Whitespace-separated words of every markdown cell before the Exercises heading.

    Everything in a markdown cell counts: headings, tables, callouts and the text of
    diagrams. Counting stops at the heading, so the exercises are left out.
    """
    words = 0
    for cell in cells_of(path):
        if cell.cell_type != "markdown":
            continue
        text, heading, _ = cell.source.partition(EXERCISES_HEADING)
        words += len(text.split())
        if heading:
            break
    return words


def is_package_import(node: ast.stmt) -> bool:
    return isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agentbook")


def names_bound(tree: ast.Module) -> set[str]:
    """Every name a cell binds anywhere: assignments, loops, defs, arguments, imports."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return bound


def top_level_bindings(tree: ast.Module) -> set[str]:
    """What a cell leaves defined for later cells; a name imported from the finished
    package is left out, because the chapter has not built it yet."""
    kept = ast.Module(body=[node for node in tree.body if not is_package_import(node)],
                      type_ignores=[])
    return names_bound(kept)


def saved_names(path: Path) -> set[str]:
    return {name for cell in save.saved_cells(path, path.parents[1])
            for name, _ in save.parse_cell(cell).names}


def uses_before_definition(path: Path) -> list[str]:
    """Each code cell that uses a saved name no earlier cell (nor itself) defines."""
    saved, defined, problems = saved_names(path), set[str](), []
    for cell in cells_of(path):
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source)
        used = {node.id for node in ast.walk(tree)
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
        early = sorted((used & saved) - defined - names_bound(tree))
        if early:
            problems.append(f"{cell.id} uses {', '.join(early)} before the chapter defines it")
        defined |= top_level_bindings(tree)
    return problems


@pytest.mark.parametrize("chapter", SHAPED, ids=lambda p: p.name)
def test_no_code_cell_is_longer_than_forty_lines(chapter: Path) -> None:
    long_cells = [f"{cell.id}: {len(cell.source.splitlines())} lines"
                  for cell in cells_of(chapter)
                  if cell.cell_type == "code"
                  and len(cell.source.splitlines()) > MAX_CODE_CELL_LINES]
    assert long_cells == []


@pytest.mark.parametrize("chapter", SHAPED, ids=lambda p: p.name)
def test_prose_stays_within_its_word_budget(chapter: Path) -> None:
    assert 1000 < prose_words(chapter) < MAX_PROSE_WORDS[chapter]


@pytest.mark.parametrize("chapter", SHAPED, ids=lambda p: p.name)
def test_no_cell_uses_a_saved_name_before_the_cell_that_defines_it(chapter: Path) -> None:
    assert uses_before_definition(chapter) == []


def test_the_use_before_definition_check_catches_an_early_use(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("from agentbook import helper\n\nhelper()"),
        nbformat.v4.new_code_cell("helper()"),
        nbformat.v4.new_code_cell("# @save\ndef helper() -> None:\n    pass"),
    ]
    for number, cell in enumerate(notebook.cells):
        cell.id = f"cell-{number}"
    path = tmp_path / "chapters" / "01_x.ipynb"
    path.parent.mkdir()
    nbformat.write(notebook, path)
    assert uses_before_definition(path) == ["cell-1 uses helper before the chapter defines it"]


def test_the_chapter_opens_with_a_complete_run_of_the_finished_package() -> None:
    cells = cells_of(ANATOMY)
    first_saved = next(i for i, cell in enumerate(cells) if cell.source.startswith("# @save"))
    preview = next(cell for cell in cells[:first_saved]
                   if cell.cell_type == "code" and "run_agent(" in cell.source)
    imports = [node for node in ast.parse(preview.source).body if is_package_import(node)]
    imported = {alias.name for node in imports for alias in node.names}
    assert {"run_agent", "refund_gate", "print_transcript"} <= imported
    printed = "".join(output.get("text", "") for output in preview.outputs)
    assert "denied" in printed and "stop=answered" in printed
    assert "'refunded_cents': 4999" in printed
