"""Ready the rendered book to read offline and to run in the page: Quarto's post-render step.

    python scripts/build/live_book.py [BOOK_DIR]   (default: $QUARTO_PROJECT_OUTPUT_DIR or _book)

Offline: Quarto adds require.js and jQuery from a CDN, and an inline `define('jquery', ...)`,
to every page whose notebook has an HTML or JavaScript output, in case it is a widget; no
option turns that off and the book's outputs need neither, so this removes exactly those tags.
Live: into BOOK_DIR/live/ it puts Pyodide's core (checked against live/pyodide-core.json; `npm
ci` in live/ installs it), the code editor (live/editor.js bundled with CodeMirror by esbuild,
both pinned in live/package-lock.json), a wheel of agentbook, the runtime (live/*.js,
live/runner.py) and each chapter's exercises as JSON, and marks each code cell of each page
with its notebook cell id, and a cell the browser cannot run as static, with the reason.
Standard library only: Quarto runs it with whichever Python is on PATH.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from itertools import takewhile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIVE = ROOT / "live"
CORE = json.loads((LIVE / "pyodide-core.json").read_text(encoding="utf-8"))
RUNTIME_FILES = ("live.js", "worker.js", "runner.py")
# Imports a browser's Python lacks, with the one line a reader sees. Any other module outside
# the standard library and agentbook is named in a generic line.
BROWSER_LACKS = {
    "matplotlib": "draws a figure with matplotlib",
    "pandas": "builds a table with pandas",
    "httpx": "talks HTTP, which the page's Python cannot",
    "http.server": "serves HTTP, which the page's Python cannot",
    "socket": "opens sockets, which the page's Python cannot",
    "subprocess": "starts another program, which a browser cannot",
    "agents": "runs the OpenAI Agents SDK, which the page's Python does not have",
    "pydantic_ai": "runs PydanticAI, which the page's Python does not have",
    "langgraph": "runs LangGraph, which the page's Python does not have",
    "langchain_core": "runs LangChain, which the page's Python does not have",
}
# agentbook's names that load a library on first use, which the page's Python lacks.
LOADS_LIBRARY = {name: "builds OpenTelemetry spans; the page's Python has no OpenTelemetry"
                 for name in ("run_spans", "spans_to_otlp_json")}
LOADS_LIBRARY |= {name: "starts a sandboxed Python process, which a browser cannot"
                  for name in ("sandboxed_python_tool", "run_sandboxed")}
LOADS_LIBRARY["mcp_tools"] = "starts an MCP server, another process, which a browser cannot"
# Chapter 4's names that run a framework (each imports it inside), which the page lacks.
LOADS_LIBRARY |= {name: "runs an agent framework, which the page's Python does not have"
                  for name in ("run_desk_in", "run_desk_with_rules", "agents_approval_trial",
                               "pydantic_approval_trial",
                               "langgraph_approval_trial", "otel_genai_spans", "agents_model",
                               "agents_tools", "gated_agents_tools", "run_in_agents",
                               "pydantic_model", "pydantic_tools", "pydantic_gate_tools",
                               "run_in_pydantic", "langchain_chat_model", "langgraph_tools",
                               "gated_tool_node", "langgraph_desk", "run_in_langgraph",
                               "kernel_read")}
# Cells whose own job has no meaning in the page, by notebook cell id, with the reason.
NOT_IN_PAGE = {
    "install-agentbook": "installs agentbook on Colab; the page has it already",
    "colab-install": "installs agentbook on Colab; the page has it already",
    "light-import": "starts a fresh Python process, which a browser cannot",
    "agentdojo-load": "reads the committed AgentDojo results, which the page does not have",
    "agentdojo-table": "sums up the AgentDojo results, which the page does not have",
    "colab-extras": "installs the MCP SDK and the frameworks on Colab; the page's Python "
                    "cannot run them",
    "mcp-cost": "reads the committed benchmark results, which the page does not have",
    "bench-table": "reads the committed benchmark results, which the page does not have",
}
WHEEL_TIME = (1980, 1, 1, 0, 0, 0)  # a fixed date: the same wheel bytes on every render
# A code cell's div, which Quarto follows with the cell's source block (a diagram's is not).
CELL_DIV = re.compile(r'<div (?:id="([^"]*)" )?class="cell"(?=[^>]*>\s*<div class="sourceCode)')
# The widget tags exactly as Quarto 1.7 writes them, each with the line break after it.
WIDGET_TAGS = re.compile(
    r"[ \t]*<script\b[^>]*\bsrc=\"https?://[^\"]*/(?:require\.js/[\d.]+/require|"
    r"jquery/[\d.]+/jquery)\.min\.js\"[^>]*>\s*</script>[ \t]*\n?"
    r"|[ \t]*<script type=\"application/javascript\">\s*define\('jquery', \[\],\s*"
    r"function\(\) \{return window\.jQuery;\}\)\s*</script>[ \t]*\n?"
)
# Quarto names the previous/next chapter links by the bare title, while they show "2  Title":
# an accessible name must contain the visible text (WCAG 2.5.3), so the link's text names it.
PAGINATION_LABEL = re.compile(r'(<a href="[^"]*" class="pagination-link") aria-label="[^"]*"')
# Quarto loads this script on every page with a diagram. Once the page has loaded, it reads
# `svg.querySelector("desc").id` of every SVG in a cell's output, so it throws a TypeError on
# the first one without a <desc> (a diagram with no Mermaid accessibility description, a
# figure shown inline) and stops. What it is for, moving the HTML labels of diagrams that
# have such a description, would misplace a subgraph's title; the book's labels are made to
# fit their boxes here instead (tidy_labels), so no page loads it.
DIAGRAM_SHIM = re.compile(
    r'[ \t]*<script src="[^"]*/quarto-diagram/mermaid-postprocess-shim\.js"></script>[ \t]*\n?')


def clean_book(book: Path) -> list[str]:
    """Remove the widget tags and the diagram script from every page under `book`, and the
    pagination links' labels that hide their visible text; say which pages lost scripts."""
    changed = []
    for page in sorted(book.rglob("*.html")):
        cleaned, removed = WIDGET_TAGS.subn("", page.read_text(encoding="utf-8"))
        cleaned, relabeled = PAGINATION_LABEL.subn(r"\1", cleaned)
        cleaned, unshimmed = DIAGRAM_SHIM.subn("", cleaned)
        if removed or relabeled or unshimmed:
            page.write_text(cleaned, encoding="utf-8")
        if removed:
            changed.append(f"{page.relative_to(book).as_posix()}: removed {removed} "
                           "require.js/jQuery tags")
        if unshimmed:
            changed.append(f"{page.relative_to(book).as_posix()}: removed Quarto's "
                           "diagram post-processing script")
    return changed


# A diagram Quarto drew at build time (mermaid-format: svg), as the <svg> tag it writes.
DIAGRAM_SVG = re.compile(r'<svg\b(?=[^>]*\bid="mermaid-figure-\d+")[^>]*>')
VIEWBOX_WIDTH = re.compile(r'\bviewbox="[-\d.]+ [-\d.]+ ([\d.]+) [\d.]+"', re.IGNORECASE)


def scale_diagram(tag: str) -> str:
    """A drawn diagram's <svg> tag, sized to the column instead of Quarto's fixed 672 by 480
    px: as wide as it was drawn, or as the column if that is narrower (book.scss), with its
    own proportions. Its text then keeps the size it was drawn at wherever the column holds
    the whole diagram."""
    width = VIEWBOX_WIDTH.search(tag)
    if width is None or 'class="diagram' in tag:
        return tag
    classes = re.search(r'\sclass="([^"]*)"', tag)
    tag = re.sub(r'\s(?:width|height|class)="[^"]*"', "", tag)
    names = " ".join(["diagram", *(classes.group(1).split() if classes else [])])
    return tag.replace("<svg", f'<svg class="{names}" style="max-width: '
                               f'{float(width.group(1)):.0f}px"', 1)


# A diagram's HTML label, which Mermaid sizes its box to when it draws it.
DIAGRAM_LABEL = re.compile(r"<foreignobject\b.*?</foreignobject>", re.DOTALL | re.IGNORECASE)
BREAK_BY_A_TAG = re.compile(r"(?<=>)\s*\n\s*|\s*\n\s*(?=<)")


def tidy_labels(page: str) -> str:
    """The page with its diagrams' labels on one line each, as Mermaid drew them. Quarto writes
    a label's tags one a line, and in a label that wraps (`white-space: break-spaces`) those
    line breaks are drawn as empty lines that push the words out of the box drawn for them."""
    def tidy(label: re.Match[str]) -> str:
        return re.sub(r"\s*\n\s*", " ", BREAK_BY_A_TAG.sub("", label.group(0)))
    return DIAGRAM_LABEL.sub(tidy, page)


def scale_diagrams(book: Path) -> list[str]:
    """Size every drawn diagram of every page under `book` and tidy its labels; say which
    pages changed."""
    changed = []
    for page in sorted(book.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        scaled, count = DIAGRAM_SVG.subn(lambda found: scale_diagram(found.group(0)), text)
        scaled = tidy_labels(scaled)
        if scaled != text:
            page.write_text(scaled, encoding="utf-8")
            changed.append(f"{page.relative_to(book).as_posix()}: {count} diagrams "
                           "scaled to the column")
    return changed


def cell_options(source: str) -> dict[str, str]:
    """The `#| key: value` options at the top of a cell."""
    lines = takewhile(lambda line: line.startswith("#|"), source.splitlines())
    return {key.strip(): value.strip()
            for key, _, value in (line[2:].partition(":") for line in lines)}


def lacking_module(tree: ast.Module) -> str | None:
    """Why the cell's own imports (not those inside a function) cannot run in the page."""
    for node in tree.body:
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for name in names:
            for module, reason in BROWSER_LACKS.items():
                if name == module or name.startswith(module + "."):
                    return reason
            top = name.split(".")[0]
            if top != "agentbook" and top not in sys.stdlib_module_names:
                return f"imports {top}, which the page's Python does not have"
    return None


def bound_and_used(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The names a cell binds at its top level, and every name it reads."""
    bound, used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, ast.Store) else used).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound.add(node.name)
    return bound, used


def classify(cells: list[dict[str, object]]) -> list[str | None]:
    """For each code cell, None when it runs in the page, else why not: Quarto skips it
    (`#| eval: false`), it imports what the browser lacks, it calls an agentbook name that
    loads such a library, or it reads a name only such a cell set."""
    reasons: list[str | None] = []
    static_names: dict[str, str] = {}
    for cell in cells:
        source = "".join(cell["source"])  # type: ignore[arg-type]
        tree = ast.parse(source)
        bound, used = bound_and_used(tree)
        used -= bound  # a name the cell sets itself is not read from an earlier cell
        reason = NOT_IN_PAGE.get(str(cell.get("id")), (
            "shows a call to a served model, which the book never makes"
            if cell_options(source).get("eval") == "false" else lacking_module(tree)))
        reason = reason or next((LOADS_LIBRARY.get(name) or static_names[name]
                                 for name in sorted(used)
                                 if name in LOADS_LIBRARY or name in static_names), None)
        for name in bound:
            if reason:
                static_names[name] = reason
            else:
                static_names.pop(name, None)
        reasons.append(reason)
    return reasons


def code_cells(notebook: Path) -> list[dict[str, object]]:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return [cell for cell in cells if cell["cell_type"] == "code"]


def mark_page(page: str, cells: list[dict[str, object]]) -> str:
    """The page with each code cell's div carrying its cell id and, if static, why."""
    if "data-cell-id=" in page:
        return page  # marked by an earlier run
    reasons = classify(cells)
    found = list(CELL_DIV.finditer(page))
    if len(found) != len(cells):
        raise SystemExit(f"{len(found)} code cells in the page, {len(cells)} in the notebook")
    parts, last = [], 0
    for match, cell, reason in zip(found, cells, reasons, strict=True):
        label = cell_options("".join(cell["source"])).get("label")  # type: ignore[arg-type]
        if match.group(1) not in (None, cell["id"], f"cell-{label}"):
            raise SystemExit(f"page cell {match.group(1)} is not notebook cell {cell['id']}")
        extra = f' data-cell-id="{html.escape(str(cell["id"]))}"'
        if reason:
            extra += f' data-live="static" data-live-reason="{html.escape(reason)}"'
        parts += [page[last:match.end()], extra]
        last = match.end()
    return "".join(parts) + page[last:]


CHECK = re.compile(r'^grader\.check\("([\w-]+)"\)\s*$')


def exercise_steps(notebook: Path) -> list[dict[str, str]]:
    """The exercise notebook as the page runs it, in order: set-up code, questions (otter's
    answer cells) and their `grader.check` cells; cells that install or drive otter are left
    out, as the page runs the public tests itself."""
    steps, prompt, question = [], "", ""
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        source = "".join(cell["source"])
        check = CHECK.match(source)
        if cell["cell_type"] == "markdown":
            if "**Question" in source:
                prompt = re.sub(r"<!--.*?-->", "", source, flags=re.DOTALL).strip()
        elif check and question:
            steps.append({"kind": "check", "id": question, "name": check.group(1)})
            question = ""
        elif "otter_answer_cell" in cell["metadata"].get("tags", []):
            question = cell["id"]
            steps.append({"kind": "question", "id": question, "prompt": prompt,
                          "source": source})
        elif not re.search(r"\b(?:otter|grader|subprocess)\b", source):
            steps.append({"kind": "setup", "id": cell["id"], "source": source})
    return steps


def test_imports_lacking(source: str) -> str | None:
    """Why a public test file cannot run in the page: an import, anywhere in it, of what the
    page's Python lacks (otter's own is stood in for by live/runner.py)."""
    imports = [node for node in ast.walk(ast.parse(source))
               if isinstance(node, ast.Import | ast.ImportFrom)
               and not any(name.split(".")[0] == "otter" for name in (
                   [alias.name for alias in node.names] if isinstance(node, ast.Import)
                   else [node.module or ""]))]
    return lacking_module(ast.Module(body=list(imports), type_ignores=[]))


def mark_static_steps(steps: list[dict[str, str]], tests: dict[str, str]) -> None:
    """Give each set-up cell or question the page cannot run a `static` reason, as
    `classify` decides for a chapter's cells; a question is also static when its public
    tests import what the page lacks. The page then says it checks only in Jupyter."""
    code = [step for step in steps if step["kind"] != "check"]
    reasons = classify([{"id": step["id"], "source": [step["source"]]} for step in code])
    tested_by = {step["id"]: step["name"] for step in steps if step["kind"] == "check"}
    for step, reason in zip(code, reasons, strict=True):
        if not reason and step["id"] in tested_by:
            reason = test_imports_lacking(tests[tested_by[step["id"]]])
        if reason:
            step["static"] = reason


def write_exercises(chapter: Path, target: Path) -> None:
    """The exercises of chapters/01_anatomy.ipynb, if any, from exercises/anatomy-exercises."""
    notebook = ROOT / "exercises" / f"{chapter.stem.split('_', 1)[-1]}-exercises.ipynb"
    if not notebook.is_file():
        return
    steps = exercise_steps(notebook)
    tests = {step["name"]: (notebook.parent / "tests" / f"{step['name']}.py")
             .read_text(encoding="utf-8") for step in steps if step["kind"] == "check"}
    mark_static_steps(steps, tests)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({"notebook": notebook.name, "steps": steps, "tests": tests},
                                 indent=1), encoding="utf-8")


def stale_packages(live: Path) -> list[str]:
    """The packages package-lock.json pins that live/node_modules lacks or holds at another
    version (a platform's optional build, such as esbuild's for another system, may be
    absent)."""
    lock = json.loads((live / "package-lock.json").read_text(encoding="utf-8"))
    stale = []
    for where, pinned in lock["packages"].items():
        if not where or pinned.get("optional"):
            continue
        manifest = live / where / "package.json"
        version = (json.loads(manifest.read_text(encoding="utf-8")).get("version")
                   if manifest.is_file() else None)
        if version != pinned["version"]:
            stale.append(f"{where.removeprefix('node_modules/')}@{pinned['version']}")
    return stale


def install_packages() -> None:
    """`npm ci` in live/ when node_modules is not what package-lock.json pins, and npm is
    there to install it; without npm the book renders static."""
    if stale_packages(LIVE) and shutil.which("npm"):
        subprocess.run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
                       cwd=LIVE, check=False)


def copy_core(target: Path) -> bool:
    """Copy Pyodide's core files, each checked against its pinned SHA-256; False where
    Pyodide is not installed and npm cannot install it (the book then stays static)."""
    package = LIVE / "node_modules" / "pyodide"
    install_packages()
    if not package.is_dir():
        return False
    target.mkdir(parents=True, exist_ok=True)
    for name, digest in CORE["files"].items():
        data = (package / name).read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            raise SystemExit(f"{package / name} is not the pinned Pyodide {CORE['version']}")
        (target / name).write_bytes(data)
    return True


def bundle_editor(target: Path) -> bool:
    """live/editor.js and the CodeMirror modules it imports, as one file for the page, made
    by the pinned esbuild; False where esbuild is missing (the cells then edit in a
    textarea). The same sources give the same bytes."""
    esbuild = LIVE / "node_modules" / ".bin" / "esbuild"
    if not esbuild.is_file():
        return False
    subprocess.run([str(esbuild), "editor.js", "--bundle", "--format=esm", "--minify",
                    "--target=es2020", "--log-level=warning", f"--outfile={target.resolve()}"],
                   cwd=LIVE, check=True)
    return True


def digest(data: bytes) -> str:
    """A wheel RECORD's hash: urlsafe base64 of the SHA-256, without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(folder: Path) -> Path:
    """A pure-Python wheel of agentbook/ (PEP 427), the same bytes for the same sources,
    written here because Quarto's Python may lack a build backend. It names no dependency:
    only the HTTP adapters, which the page does not run, import httpx."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["version"]
    info = f"agentbook-{version}.dist-info"
    files = {f"agentbook/{path.name}": path.read_bytes()
             for path in sorted((ROOT / "agentbook").glob("*.py"))}
    files[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: agentbook\n"
                                 f"Version: {version}\nRequires-Python: >=3.11\n").encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: scripts/build/live_book.py\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = [f"{name},sha256={digest(data)},{len(data)}\n" for name, data in files.items()]
    files[f"{info}/RECORD"] = "".join([*record, f"{info}/RECORD,,\n"]).encode()
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"agentbook-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(zipfile.ZipInfo(name, WHEEL_TIME), data, zipfile.ZIP_DEFLATED)
    return wheel


def build(book: Path) -> list[str]:
    """Everything above, into `book`; says what it did."""
    target = book / "live"
    done = clean_book(book) + scale_diagrams(book)
    if copy_core(target / "pyodide"):
        wheel = build_wheel(target)
        for name in RUNTIME_FILES:
            shutil.copyfile(LIVE / name, target / name)
        (target / "wheel.json").write_text(json.dumps({"wheel": wheel.name}), encoding="utf-8")
        editor = "CodeMirror editor" if bundle_editor(target / "editor.js") else "no editor"
        done.append(f"live/: Pyodide {CORE['version']} core, {wheel.name}, {editor}")
    else:
        # Without the runtime the pages say they are the static book (live/live.html).
        print("live_book.py: Pyodide is not in live/node_modules and `npm ci` could not "
              "install it, so the cells will not run in the page", file=sys.stderr)
    for chapter in sorted((ROOT / "chapters").glob("*.ipynb")):
        page = book / "chapters" / f"{chapter.stem}.html"
        if not page.is_file():
            continue
        cells = code_cells(chapter)
        page.write_text(mark_page(page.read_text(encoding="utf-8"), cells), encoding="utf-8")
        write_exercises(chapter, target / "exercises" / f"{chapter.stem}.json")
        live = sum(reason is None for reason in classify(cells))
        done.append(f"{page.relative_to(book).as_posix()}: {live} of {len(cells)} "
                    "code cells run in the page")
    return done


def main(argv: list[str]) -> int:
    book = Path(argv[0] if argv else os.environ.get("QUARTO_PROJECT_OUTPUT_DIR") or "_book")
    if not book.is_dir():
        raise SystemExit(f"{book} is not a folder: render the book first")
    for line in build(book):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
