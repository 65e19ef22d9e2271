"""Reader notebooks: every chapter without Quarto's markup, for JupyterLab, Binder and Colab.

Quarto turns the chapters into the rendered book, but a reader who opens a chapter notebook
itself meets Quarto's source: `{#sec-tools}` after headings, `@fig-endings` for a figure's
number, `::: {.callout-tip}` fences, `{mermaid}` blocks and `#| label:` lines. This converter
writes, for every notebook chapter and appendix that `_quarto.yml` lists, a reader notebook of
the same name in `notebooks/`, with that markup turned into what Jupyter shows well:

- headings carry their numbers as the book prints them ("1.4 The effect boundary"), and an
  anchor named after their label;
- `@sec-`/`@fig-`/`@tbl-`/`@eq-` references become the book's words ("Section 1.4",
  "Figure 1.3", "Chapter 1", "Appendix A"), linked to the anchor in the same notebook, or to
  the page of the rendered book when the label lives in another file;
- citations become "(Yao et al. 2023)", with the works cited listed at the end;
- callouts become blockquotes whose first line is the callout's title in bold;
- a `{mermaid}` block becomes a plain ```` ```mermaid ```` fence (JupyterLab 4.1 and later
  draw it) with its caption underneath and a link to the drawn figure in the rendered book,
  for Colab, which shows mermaid as text;
- figure captions go under the figure and table captions above the table, as in the book,
  and a labelled equation gets its number with `\\tag`;
- cell options (`#|` lines, `%%|` in diagrams) are removed: their labels and captions are
  now visible text, and in Jupyter they would only be comments that mean nothing.

Code cells keep their source (less the option lines), metadata, execution counts and outputs,
byte for byte. Numbers follow Quarto's rules for a book with `crossref: chapters: true`:
numbered chapters count 1, 2, ... and appendices A, B, ...; sections, figures, tables and
equations are numbered within their chapter, in reading order.

    python -m scripts.readers           write notebooks/
    python -m scripts.readers --check   exit 1, naming each stale notebook, when one differs
"""

from __future__ import annotations

import argparse
import json
import re
import string
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from scripts.book_checks import (
    CITATION,
    CODE_SPAN,
    FENCE,
    bibliography_keys,
    cell_options,
    cell_source,
    listed_files,
    load_config,
    read_cells,
    references,
    repository,
)

ROOT = Path(__file__).resolve().parent.parent
READERS_DIR = "notebooks"
# Where the rendered book is published: GitHub Pages of the repository that `book: repo-url`
# in _quarto.yml names. The one place that states the book's address; a chapter's page is
# this address plus the chapter's path with .html for .ipynb or .qmd.
RENDERED_BOOK = "https://{owner}.github.io/{name}/"

# Quarto's words for each kind of cross-reference, and the callouts' default titles.
PREFIXES = {"sec": "Section", "fig": "Figure", "tbl": "Table", "eq": "Equation", "lst": "Listing"}
CALLOUT_TITLES = {"note": "Note", "tip": "Tip", "important": "Important", "warning": "Warning",
                  "caution": "Caution"}

HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
ATTRIBUTES = re.compile(r"\s*\{([^{}]*)\}\s*$")  # a trailing {#label .class key="value"}
DIV_OPEN = re.compile(r"^(:{3,})\s*(?:\{([^{}]*)\}|([\w-]+))\s*$")
DIV_CLOSE = re.compile(r"^(:{3,})\s*$")
TABLE_CAPTION = re.compile(r"^(?::|Table:)\s+(.*?)\s*$")
EQUATION_END = re.compile(r"^(.*?)\$\$\s*\{#(eq-[^\s{}]+)[^{}]*\}\s*$")
IMAGE_FIGURE = re.compile(r"^!\[(.*)\]\(([^()\s]+)\)\{([^{}]*#fig-[^{}]*)\}\s*$")
# A bracketed group of citations or references: [@a], [see @a, p. 3; @b], [-@fig-x].
BRACKETED = re.compile(r"\[([^\[\]]*?-?@[^\[\]]*)\](?![(\[{])")
SPAN_ATTRIBUTES = re.compile(r"(\]\([^()\s]*\))\{[^{}]*\}")  # [text](url){target="_blank"}
BRACKETED_SPAN = re.compile(r"\[([^\[\]]+)\]\{[^{}]*\}")  # [text]{.smallcaps}

# What must never reach a reader notebook's prose (code spans and code blocks may show any
# of it, as the rendered book does).
LEFTOVER_MARKUP = {
    "a Quarto attribute block": re.compile(r"\{[#.][A-Za-z][\w-]*"),
    "a div fence": re.compile(r"^:::", re.MULTILINE),
    "a shortcode": re.compile(r"\{\{<"),
    "a %%| diagram option": re.compile(r"^%%\|", re.MULTILINE),
}
MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.DOTALL)


class ReaderError(Exception):
    """A chapter cannot be converted; the message names the file, the cell and the reason."""


# --------------------------------------------------------------------------- numbering


@dataclass(frozen=True)
class Target:
    """What a label refers to: its words in the book and where it lives."""

    text: str  # "Section 1.4", "Figure A.2", "Chapter 1"
    page: str  # the listed file that defines it, e.g. "chapters/01_anatomy.ipynb"
    anchor: str  # the label itself, which is also the anchor's id


@dataclass
class Numbering:
    """The counters of one file of the book, in reading order."""

    page: str
    chapter: str | None  # "1", "A", or None for an unnumbered chapter
    appendix: bool = False
    sections: list[int] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    targets: dict[str, Target] = field(default_factory=dict)
    seen_title: bool = False

    def heading(self, level: int, label: str, numbered: bool, title: str) -> str | None:
        """Count a heading; return its number as printed ("1.4"), or None if unnumbered."""
        number: str | None = None
        if level == 1 and not self.seen_title:
            self.seen_title = True
            number = self.chapter if numbered else None
            word = "Appendix" if self.appendix else "Chapter"
            self.record(label, f"{word} {number}" if number else title)
            # The book titles an appendix "Appendix A — Title" and a chapter "1 Title".
            return f"Appendix {number} —" if number and self.appendix else number
        if level == 1:
            raise ReaderError(f"a chapter has one level-1 heading, its title; found another: "
                              f"{title!r}")
        if numbered and self.chapter is not None:
            depth = level - 1
            del self.sections[depth:]
            self.sections += [0] * (depth - len(self.sections))
            self.sections[depth - 1] += 1
            number = ".".join([self.chapter, *map(str, self.sections)])
        self.record(label, f"Section {number}" if number else title)
        return number

    def item(self, kind: str, label: str) -> str:
        """Count a figure, table or equation; return its number ("1.3")."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        number = str(self.counts[kind])
        if self.chapter is not None:
            number = f"{self.chapter}.{number}"
        self.record(label, f"{PREFIXES[kind]} {number}")
        return number

    def record(self, label: str, text: str) -> None:
        if label:
            self.targets[label] = Target(text, self.page, label)


def appendix_letter(index: int) -> str:
    return string.ascii_uppercase[index]


# --------------------------------------------------------------------------- bibliography


@dataclass(frozen=True)
class Work:
    """One entry of references.bib, as much of it as the reference list prints."""

    key: str
    kind: str
    fields: dict[str, str]

    @property
    def authors(self) -> list[str]:
        names = re.split(r"\s+and\s+", self.fields.get("author", ""))
        return [name.strip() for name in names if name.strip()]

    def surnames(self) -> str:
        """The authors as an author-date citation names them: "Yao et al.", "A and B"."""
        names = [surname(name) for name in self.authors if name != "others"]
        if not names:
            return self.fields.get("title", self.key)
        if len(names) == 1 and "others" not in self.authors:
            return names[0]
        if len(names) == 2 and "others" not in self.authors:
            return f"{names[0]} and {names[1]}"
        return f"{names[0]} et al."

    def year(self) -> str:
        return self.fields.get("year", "n.d.")

    def entry(self) -> str:
        """The entry in the reference list, in the author-date style Quarto uses by default."""
        names = [inverted(name) if number == 0 else uninverted(name)
                 for number, name in enumerate(self.authors) if name != "others"]
        if "others" in self.authors:
            authors = ", ".join(names) + ", et al."
        elif len(names) > 1:
            authors = ", ".join(names[:-1]) + ", and " + names[-1]
        else:
            authors = names[0] if names else ""
        title = self.fields.get("title", "")
        parts = [f"{authors.removesuffix('.')}. {self.year()}." if authors
                 else f"{self.year()}."]
        if self.kind == "book":
            parts.append(f"*{title}*.")
        else:
            parts.append(f"“{title}.”")
        container = self.fields.get("booktitle") or self.fields.get("journal")
        if container:
            parts.append(f"In *{container}*." if self.kind == "inproceedings"
                         else f"*{container}*.")
        if self.fields.get("publisher"):
            parts.append(self.fields["publisher"] + ".")
        url = self.fields.get("url") or self.fields.get("howpublished", "")
        if url.startswith(("http://", "https://")):
            parts.append(f"<{url}>.")
        return " ".join(parts)


def surname(name: str) -> str:
    return name.split(",", 1)[0].strip() if "," in name else name.split()[-1]


def inverted(name: str) -> str:
    """"Yao, Shunyu" stays; "Shunyu Yao" becomes "Yao, Shunyu"; "Anthropic" stays."""
    if "," in name or " " not in name:
        return name
    *given, family = name.split()
    return f"{family}, {' '.join(given)}"


def uninverted(name: str) -> str:
    if "," not in name:
        return name
    family, given = (part.strip() for part in name.split(",", 1))
    return f"{given} {family}"


def latex_to_text(value: str) -> str:
    """A BibTeX field as plain text: \\url{x} is x, braces that protect case go."""
    value = re.sub(r"\\url\{([^{}]*)\}", r"\1", value)
    value = re.sub(r"\\[a-zA-Z]+\s*", "", value)
    return re.sub(r"\s+", " ", value.replace("{", "").replace("}", "")).strip()


def read_bibliography(root: Path) -> dict[str, Work]:
    """Every entry of the bibliography `_quarto.yml` names, by key."""
    name, _ = bibliography_keys(root)
    path = root / name
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    works: dict[str, Work] = {}
    for match in re.finditer(r"@(\w+)\s*\{", text):
        kind = match.group(1).lower()
        if kind in ("comment", "string", "preamble"):
            continue
        key, _, body = balanced_body(text, match.end() - 1).partition(",")
        works[key.strip()] = Work(key.strip(), kind, bib_fields(body))
    return works


def balanced_body(text: str, start: int) -> str:
    """The text inside the brace that opens at `start` and the one that closes it."""
    depth = 0
    for position in range(start, len(text)):
        if text[position] == "{":
            depth += 1
        elif text[position] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1:position]
    raise ReaderError(f"references.bib: a brace opened near {text[start:start + 40]!r} "
                      "is never closed")


def bib_fields(body: str) -> dict[str, str]:
    """The `name = {value}`, `name = "value"` and `name = value` fields of one entry."""
    fields: dict[str, str] = {}
    position = 0
    while match := re.compile(r"\s*(\w+)\s*=\s*").match(body, position):
        start = match.end()
        if body.startswith("{", start):
            value = balanced_body(body, start)
            end = start + len(value) + 2
        elif body.startswith('"', start):
            end = body.index('"', start + 1) + 1
            value = body[start + 1:end - 1]
        else:
            end = start + len(re.match(r"[^,]*", body[start:]).group(0))  # type: ignore[union-attr]
            value = body[start:end]
        fields[match.group(1).lower()] = latex_to_text(value)
        position = end + 1 if body.startswith(",", end) else end
    return fields


# --------------------------------------------------------------------------- inline text


@dataclass
class Context:
    """What converting one file needs to know: its counters and the whole book's labels."""

    numbering: Numbering
    targets: dict[str, Target]  # every label in the book, once it is known
    works: dict[str, Work]
    book_url: str
    counting: bool = False  # the first pass, which only finds every label's number
    cited: list[str] = field(default_factory=list)

    def link(self, target: Target) -> str:
        if target.page == self.numbering.page:
            return f"#{target.anchor}"
        return f"{self.book_url}{page_url(target.page)}#{target.anchor}"


def page_url(page: str) -> str:
    """The path of a listed file's page in the rendered book."""
    return re.sub(r"\.(ipynb|qmd|md)$", ".html", page)


def outside_code(text: str, convert: Callable[[str], str]) -> str:
    """Apply `convert` to the parts of a piece of prose that are not code spans."""
    pieces, last = [], 0
    for match in CODE_SPAN.finditer(text):
        pieces += [convert(text[last:match.start()]), match.group(0)]
        last = match.end()
    return "".join([*pieces, convert(text[last:])])


def crossref_kind(key: str) -> str | None:
    kind = key.split("-", 1)[0].lower()
    return kind if kind in PREFIXES and "-" in key else None


def render_reference(key: str, context: Context, suppress: bool = False) -> str:
    """One `@sec-x` as the book prints it, linked to its anchor."""
    if context.counting:
        return key
    target = context.targets.get(key.lower())
    if target is None:
        raise ReaderError(f"@{key} refers to a label the book does not have")
    text = target.text.split(" ", 1)[1] if suppress and " " in target.text else target.text
    return f"[{text}]({context.link(target)})"


def cite(key: str, context: Context) -> Work:
    work = context.works.get(key)
    if work is None:
        raise ReaderError(f"@{key} is cited but the bibliography has no entry")
    if key not in context.cited:
        context.cited.append(key)
    return work


def render_group(body: str, context: Context) -> str | None:
    """A bracketed group: [@a; see @b, p. 3] as "(A 2023; see B 2024, p. 3)", and
    [@fig-a; @fig-b] as "Figure 1.1, Figure 1.2". None when the brackets hold no key."""
    rendered, citations, keys = [], False, 0
    for item in (part.strip() for part in body.split(";")):
        match = CITATION.search(item)
        if match is None:
            rendered.append(item)
            continue
        keys += 1
        prefix, key, suffix = item[:match.start()], match.group(1), item[match.end():]
        suppress = prefix.endswith("-")
        prefix = prefix.removesuffix("-")
        if crossref_kind(key):
            rendered.append(prefix + render_reference(key, context, suppress) + suffix)
            continue
        citations = True
        if context.counting:
            continue
        work = cite(key, context)
        who = "" if suppress else work.surnames() + " "
        rendered.append(f"{prefix}[{who}{work.year()}](#ref-{key}){suffix}")
    if not keys:
        return None
    return f"({'; '.join(rendered)})" if citations else ", ".join(rendered)


def render_in_text(key: str, context: Context) -> str:
    """A bare @key: a reference, or an in-text citation "Yao et al. (2023)"."""
    if crossref_kind(key):
        return render_reference(key, context)
    if context.counting:
        return key
    work = cite(key, context)
    return f"[{work.surnames()} ({work.year()})](#ref-{key})"


def inline(text: str, context: Context) -> str:
    """Citations, references and attribute spans of a piece of prose, in the book's words."""

    def convert(piece: str) -> str:
        piece = BRACKETED.sub(lambda match: render_group(match.group(1), context)
                              or match.group(0), piece)
        piece = CITATION.sub(lambda match: render_in_text(match.group(1), context), piece)
        piece = SPAN_ATTRIBUTES.sub(r"\1", piece)
        return BRACKETED_SPAN.sub(r"\1", piece)

    return outside_code(text, convert)


# --------------------------------------------------------------------------- blocks


def parse_attributes(text: str) -> tuple[str, list[str], dict[str, str]]:
    """`#label .class key="value"` as (label, classes, key-value pairs)."""
    label, classes, pairs = "", [], {}
    for match in re.finditer(r'(\w[\w-]*)="([^"]*)"|(\w[\w-]*)=(\S+)|([#.])([^\s#.]+)|(-)',
                             text):
        if match.group(1):
            pairs[match.group(1)] = match.group(2)
        elif match.group(3):
            pairs[match.group(3)] = match.group(4)
        elif match.group(5) == "#":
            label = match.group(6)
        elif match.group(5) == ".":
            classes.append(match.group(6))
        else:
            classes.append("unnumbered")
    return label, classes, pairs


def anchor(label: str) -> list[str]:
    """An empty HTML block with the label as its id, then the blank line that ends it."""
    return [f'<div id="{label}"></div>', ""]


def caption_line(kind: str, label: str, caption: str, context: Context) -> str:
    number = context.numbering.item(kind, label)
    return f"{PREFIXES[kind]} {number}: {inline(caption, context)}"


def convert_markdown(text: str, context: Context) -> str:
    """One markdown cell, or a whole .qmd file, without Quarto's markup."""
    return "\n".join(convert_lines(text.split("\n"), context))


def convert_lines(lines: list[str], context: Context) -> list[str]:
    out: list[str] = []
    prose: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        fence = FENCE.match(line)
        div = DIV_OPEN.match(line)
        if fence:
            out += convert_prose(prose, context)
            prose = []
            end = closing_fence(lines, index, fence.group(1))
            out += convert_fence(fence.group(2), lines[index:end + 1], context)
            index = end + 1
        elif div and not DIV_CLOSE.match(line):
            out += convert_prose(prose, context)
            prose = []
            end = closing_div(lines, index, len(div.group(1)))
            out += convert_div(div.group(2) or "." + div.group(3), lines[index + 1:end], context)
            index = end + 1
        else:
            prose.append(line)
            index += 1
    return out + convert_prose(prose, context)


def closing_fence(lines: list[str], start: int, opening: str) -> int:
    for index in range(start + 1, len(lines)):
        match = FENCE.match(lines[index])
        if (match and match.group(1)[0] == opening[0] and len(match.group(1)) >= len(opening)
                and not match.group(2)):
            return index
    return len(lines) - 1


def closing_div(lines: list[str], start: int, width: int) -> int:
    """The line that closes the div opened at `start`, skipping nested divs and code."""
    depth, index = 0, start
    while index < len(lines):
        line = lines[index]
        fence = FENCE.match(line)
        if fence and index > start:
            index = closing_fence(lines, index, fence.group(1)) + 1
            continue
        if DIV_CLOSE.match(line):
            depth -= 1
            if depth == 0:
                return index
        elif DIV_OPEN.match(line):
            depth += 1
        index += 1
    raise ReaderError(f"line {start + 1} ({lines[start].strip()!r}) opens a div that is never "
                      "closed")


def convert_fence(info: str, block: list[str], context: Context) -> list[str]:
    """A fenced block: code stays as it is; a {mermaid} block becomes a captioned diagram."""
    if info.strip() != "{mermaid}":
        return block
    body = block[1:-1] if len(block) > 1 else []
    options = cell_options(body, "%%|")
    diagram = [line for line in body if not line.startswith("%%|")]
    label = str(options.get("label") or "")
    out = ["```mermaid", *diagram, "```"]
    caption = str(options.get("fig-cap") or "")
    if not label.startswith("fig-"):
        return out
    out = [*anchor(label), *out, ""]
    out.append(caption_line("fig", label, caption, context))
    if not context.counting:
        target = context.targets[label]
        drawn = f"{context.book_url}{page_url(target.page)}#{label}"
        out += ["", f"*Where the diagram above shows as text, as on Colab, see "
                    f"[{target.text} in the rendered book]({drawn}).*"]
    return out


def convert_div(attributes: str, body: list[str], context: Context) -> list[str]:
    """A `:::` div: a callout becomes a blockquote, a figure or table div gets its caption,
    and any other div just loses its fences."""
    label, classes, pairs = parse_attributes(attributes)
    callout = next((name for name in classes if name.startswith("callout-")), None)
    if callout:
        return callout_quote(callout.removeprefix("callout-"), pairs.get("title"), body,
                             context)
    kind = crossref_kind(label)
    if kind in ("fig", "tbl"):
        return captioned_div(kind, label, body, context)
    return convert_lines(body, context)


def callout_quote(kind: str, title: str | None, body: list[str],
                  context: Context) -> list[str]:
    first = next((index for index, line in enumerate(body) if line.strip()), None)
    if title is None and first is not None and (heading := HEADING.match(body[first])):
        title = ATTRIBUTES.sub("", heading.group(2))
        body = body[first + 1:]
    title = inline(title or CALLOUT_TITLES.get(kind, kind.capitalize()), context)
    inner = convert_lines(body, context)
    while inner and not inner[0].strip():
        inner.pop(0)
    while inner and not inner[-1].strip():
        inner.pop()
    return [f"> **{title}**", ">", *[f"> {line}" if line.strip() else ">" for line in inner]]


def captioned_div(kind: str, label: str, body: list[str], context: Context) -> list[str]:
    """`::: {#fig-x}` content, then its caption as the last paragraph."""
    while body and not body[-1].strip():
        body = body[:-1]
    split = max((index for index, line in enumerate(body) if not line.strip()), default=-1)
    content, caption = body[:split + 1], " ".join(line.strip() for line in body[split + 1:])
    if kind == "tbl":
        numbered = caption_line(kind, label, caption, context)
        return [*anchor(label), numbered, "", *convert_lines(content, context)]
    converted = convert_lines(content, context)
    return [*anchor(label), *converted, "", caption_line(kind, label, caption, context)]


def convert_prose(lines: list[str], context: Context) -> list[str]:
    """Markdown outside fences and divs: headings, equations, table captions, images, refs."""
    lines = move_table_captions(lines)
    out: list[str] = []
    for line in lines:
        heading = HEADING.match(line)
        equation = EQUATION_END.match(line)
        image = IMAGE_FIGURE.match(line)
        table = TABLE_CAPTION.match(line)
        if heading:
            out.append(convert_heading(len(heading.group(1)), heading.group(2), context))
        elif equation:
            out += numbered_equation(out, equation.group(1), equation.group(2), context)
        elif image:
            label, _, _ = parse_attributes(image.group(3))
            out += [*anchor(label), f"![{inline(image.group(1), context)}]({image.group(2)})",
                    "", caption_line("fig", label, image.group(1), context)]
        elif table and "{#tbl-" in line:
            caption = ATTRIBUTES.search(table.group(1))
            label, _, _ = parse_attributes(caption.group(1) if caption else "")
            text = ATTRIBUTES.sub("", table.group(1))
            out += [*anchor(label), caption_line("tbl", label, text, context), ""]
        else:
            out.append(inline(line, context) if line.strip() else line)
    return out


def move_table_captions(lines: list[str]) -> list[str]:
    """Put a pipe table's caption (`: text {#tbl-x}`, written after the table) above it,
    where the book prints it."""
    lines = list(lines)
    for index, line in enumerate(lines):
        if not (TABLE_CAPTION.match(line) and "{#tbl-" in line):
            continue
        end = index - 1
        while end >= 0 and not lines[end].strip():
            end -= 1
        start = end
        while start >= 0 and lines[start].lstrip().startswith("|"):
            start -= 1
        if start == end:  # no table right above: the caption is already above its table
            continue
        del lines[index]
        if index < len(lines) and not lines[index].strip() and not lines[index - 1].strip():
            del lines[index]  # the caption's paragraph is gone; so is one of its blank lines
        lines.insert(start + 1, line)
    return lines


def convert_heading(level: int, text: str, context: Context) -> str:
    attributes = ATTRIBUTES.search(text)
    label, classes, _ = parse_attributes(attributes.group(1) if attributes else "")
    title = ATTRIBUTES.sub("", text)
    number = context.numbering.heading(level, label, "unnumbered" not in classes, title)
    words = inline(title, context)
    shown = f"{number} {words}" if number else words
    return f"{'#' * level} {shown}" + (f'<a id="{label}"></a>' if label else "")


def numbered_equation(out: list[str], before: str, label: str, context: Context) -> list[str]:
    """Close a labelled display equation with its number; put its anchor above it."""
    number = context.numbering.item("eq", label)
    closing = [f"{before.rstrip()} \\tag{{{number}}} $$"] if before.strip() else [
        f"\\tag{{{number}}}", "$$"]
    if before.strip().startswith("$$"):  # the whole equation on one line
        return [*anchor(label), *closing]
    opening = max((index for index, line in enumerate(out) if line.strip().startswith("$$")),
                  default=None)
    if opening is None:
        raise ReaderError(f"the equation {label} has no opening $$")
    out[opening:opening] = anchor(label)
    return closing


# --------------------------------------------------------------------------- notebooks


def convert_notebook(path: Path, context: Context) -> dict[str, Any]:
    """The reader notebook of one chapter notebook."""
    notebook: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    cells: list[dict[str, Any]] = []
    page = context.numbering.page
    for cell in notebook.get("cells", []):
        try:
            cells += convert_cell(cell, context)
        except ReaderError as error:
            raise ReaderError(f"{page}, cell {cell.get('id', '?')}: {error}") from None
    if context.cited and not context.counting:
        cells.append(references_cell(context))
    ids = [cell.get("id") for cell in cells]
    if duplicates := sorted({str(name) for name in ids if ids.count(name) > 1}):
        raise ReaderError(f"{page}: cell ids {', '.join(duplicates)} occur twice; the "
                          "reader notebook names a caption cell after its code cell plus "
                          "-caption and the reference list 'references'")
    notebook["cells"] = cells
    return notebook


def convert_cell(cell: dict[str, Any], context: Context) -> list[dict[str, Any]]:
    if cell.get("cell_type") == "markdown":
        converted = dict(cell, source=convert_markdown(cell_source(cell), context))
        return [converted]
    if cell.get("cell_type") != "code":
        return [cell]
    lines = cell_source(cell).split("\n")
    options = cell_options(lines, "#|")
    code = dict(cell, source="\n".join(line for line in lines if not line.startswith("#|")))
    label = str(options.get("label") or "")
    kind = crossref_kind(label)
    if kind == "fig":
        caption = caption_line("fig", label, str(options.get("fig-cap") or ""), context)
        return [code, markdown(f"{cell['id']}-caption", [*anchor(label), caption])]
    if kind == "tbl":
        caption = caption_line("tbl", label, str(options.get("tbl-cap") or ""), context)
        return [markdown(f"{cell['id']}-caption", [*anchor(label), caption]), code]
    return [code]


def markdown(cell_id: str, lines: list[str]) -> dict[str, Any]:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": "\n".join(lines)}


def references_cell(context: Context) -> dict[str, Any]:
    """The works this notebook cites, in the order of the book's reference list."""
    works = sorted((context.works[key] for key in context.cited),
                   key=lambda work: (work.surnames().lower(), work.year()))
    lines = ["## References", ""]
    for work in works:
        lines += [f'<div id="ref-{work.key}"></div>', "", work.entry(), ""]
    return markdown("references", lines[:-1])


@dataclass(frozen=True)
class Book:
    """The book's files in reading order, with each one's chapter number."""

    root: Path
    files: list[tuple[str, str | None, bool]]  # (path, chapter number or None, appendix)
    book_url: str


def read_book(root: Path) -> Book:
    config = load_config(root)
    slug, _ = repository(config)
    if not slug:
        raise ReaderError("_quarto.yml: book: repo-url must be a https://github.com/OWNER/NAME "
                          "address, from which the rendered book's address follows")
    owner, name = slug.split("/")
    book = config.get("book") or {}
    appendices = set(listed_files({"book": {"appendices": book.get("appendices") or []}}))
    files: list[tuple[str, str | None, bool]] = []
    chapters = letters = 0
    for page in listed_files(config):
        path = root / page
        if not path.is_file():
            raise ReaderError(f"_quarto.yml lists {page}, which does not exist")
        if not title_is_numbered(path):
            files.append((page, None, page in appendices))
        elif page in appendices:
            files.append((page, appendix_letter(letters), True))
            letters += 1
        else:
            chapters += 1
            files.append((page, str(chapters), False))
    return Book(root, files, RENDERED_BOOK.format(owner=owner, name=name))


def markdown_of(path: Path) -> list[str]:
    if path.suffix == ".ipynb":
        return [cell_source(cell) for cell in read_cells(path)
                if cell.get("cell_type") == "markdown"]
    return [path.read_text(encoding="utf-8")]


def title_is_numbered(path: Path) -> bool:
    """Whether the file's title (its first level-1 heading) is numbered."""
    for text in markdown_of(path):
        for line in strip_fences(text):
            heading = HEADING.match(line)
            if heading and len(heading.group(1)) == 1:
                attributes = ATTRIBUTES.search(heading.group(2))
                _, classes, _ = parse_attributes(attributes.group(1) if attributes else "")
                return "unnumbered" not in classes
    return True


def strip_fences(text: str) -> Iterator[str]:
    opening: str | None = None
    for line in text.split("\n"):
        fence = FENCE.match(line)
        if opening is None and fence:
            opening = fence.group(1)
        elif opening is not None and fence and fence.group(1).startswith(opening[0]) \
                and not fence.group(2):
            opening = None
        elif opening is None:
            yield line


def new_context(book: Book, page: str, targets: dict[str, Target] | None,
                works: dict[str, Work]) -> Context:
    """The context for converting `page`; without targets, for the counting pass."""
    _, chapter, appendix = next(entry for entry in book.files if entry[0] == page)
    return Context(Numbering(page, chapter, appendix), targets or {}, works, book.book_url,
                   counting=targets is None)


def all_targets(book: Book, works: dict[str, Work]) -> dict[str, Target]:
    """Every label of the book with its words, from a counting pass over every listed file."""
    targets: dict[str, Target] = {}
    for page, _, _ in book.files:
        context = new_context(book, page, None, works)
        path = book.root / page
        if path.suffix == ".ipynb":
            convert_notebook(path, context)
        else:
            try:
                convert_markdown(path.read_text(encoding="utf-8"), context)
            except ReaderError as error:
                raise ReaderError(f"{page}: {error}") from None
        targets.update(context.numbering.targets)
    return targets


def reader_notebooks(root: Path) -> dict[str, str]:
    """Every reader notebook's path and text, built in memory from the chapters."""
    book = read_book(root)
    works = read_bibliography(root)
    targets = all_targets(book, works)
    readers: dict[str, str] = {}
    for page, _, _ in book.files:
        if not page.endswith(".ipynb"):
            continue
        context = new_context(book, page, targets, works)
        notebook = convert_notebook(root / page, context)
        name = f"{READERS_DIR}/{Path(page).name}"
        check_converted(name, notebook)
        text = nbformat.writes(nbformat.from_dict(notebook))
        readers[name] = text if text.endswith("\n") else text + "\n"
    return readers


def leftover_markup(text: str) -> list[str]:
    """What Quarto markup is left in a piece of markdown, outside code."""
    prose = MATH.sub(" ", CODE_SPAN.sub(" ", "\n".join(strip_fences(text))))
    found = [f"@{key}" for key in references(text)]
    found += [name for name, pattern in LEFTOVER_MARKUP.items() if pattern.search(prose)]
    lines = text.split("\n")
    found += ["a {mermaid} block" for line in lines
              if (fence := FENCE.match(line)) and fence.group(2) == "{mermaid}"]
    found += ["a %%| diagram option" for line in lines if line.startswith("%%|")]
    return found


def check_converted(name: str, notebook: dict[str, Any]) -> None:
    """Fail, naming the cell, when Quarto markup survived the conversion."""
    for cell in notebook["cells"]:
        source = cell_source(cell)
        if cell["cell_type"] == "markdown":
            found = leftover_markup(source)
        else:
            found = ["a #| cell option"] if re.search(r"^#\|", source, re.MULTILINE) else []
        if found:
            raise ReaderError(f"{name}, cell {cell['id']}: the reader notebook still has "
                              f"{', '.join(found)}")


def write_readers(root: Path, readers: dict[str, str]) -> list[str]:
    """Write the reader notebooks that changed, remove ones whose chapter is gone; return
    the names written or removed."""
    changed = []
    for name, text in readers.items():
        path = root / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed.append(name)
    for path in sorted((root / READERS_DIR).glob("*.ipynb")):
        name = path.relative_to(root).as_posix()
        if name not in readers:
            path.unlink()
            changed.append(name)
    return changed


def stale_readers(root: Path) -> list[str]:
    """The reader notebooks that differ from what the chapters give, or should not exist."""
    readers = reader_notebooks(root)
    stale = [name for name, text in readers.items()
             if not (root / name).is_file()
             or (root / name).read_text(encoding="utf-8") != text]
    stale += [path.relative_to(root).as_posix()
              for path in sorted((root / READERS_DIR).glob("*.ipynb"))
              if path.relative_to(root).as_posix() not in readers]
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a reader notebook is stale")
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = stale_readers(ROOT)
            for name in stale:
                print(f"{name} is stale: run python -m scripts.readers", file=sys.stderr)
            return 1 if stale else 0
        for name in write_readers(ROOT, reader_notebooks(ROOT)):
            print(f"wrote {name}")
    except ReaderError as error:
        print(error, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
