// The live cells' code editor: CodeMirror 6 with Python in the book's own colors. This file
// is the source; scripts/build/live_book.py bundles it with esbuild into _book/live/, so the
// page loads it from the book itself. live.js knows an editor only by what createEditor
// returns: { dom, getText, setText, focus, destroy }.
import { EditorState } from "@codemirror/state";
import { EditorView, keymap, drawSelection, highlightActiveLine } from "@codemirror/view";
import { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
import {
  HighlightStyle, LanguageSupport, bracketMatching, indentOnInput, indentUnit,
  syntaxHighlighting,
} from "@codemirror/language";
import { pythonLanguage } from "@codemirror/lang-python";
import { styleTags, tags } from "@lezer/highlight";

// Quarto's highlighting writes each token class's color into a CSS variable
// (--quarto-hl-kw-color for keywords, and so on); the editor uses the same variables, so
// a cell looks the same before and while it is edited, whatever the book's theme.
const color = (token) => `var(--quarto-hl-${token}-color)`;
const bookColors = HighlightStyle.define([
  { tag: tags.controlKeyword, color: color("cf"), fontWeight: "bold" },
  { tag: [tags.keyword, tags.operatorKeyword, tags.definitionKeyword], color: color("kw"),
    fontWeight: "bold" },
  { tag: tags.moduleKeyword, color: color("im") },
  { tag: [tags.string, tags.special(tags.string), tags.escape], color: color("st") },
  { tag: tags.special(tags.brace), color: color("sc") },
  { tag: tags.number, color: color("dv") },
  { tag: [tags.bool, tags.null, tags.self], color: color("va") },
  { tag: tags.comment, color: color("co") },
  { tag: tags.operator, color: color("op") },
  { tag: tags.derefOperator, color: "inherit" },
  { tag: tags.meta, color: color("at") },
]);

// Where pandoc's Python rules and lezer's differ, follow pandoc: `from` and `as` are
// imports, a string standing alone (a docstring) is a comment, a decorator is one token,
// `*` is an operator, and an f-string's braces, conversion and format spec are special.
const bookPython = new LanguageSupport(pythonLanguage.configure({ props: [styleTags({
  "from as": tags.moduleKeyword,
  "ExpressionStatement/String": tags.docComment,
  "Decorator/VariableName": tags.meta,
  '"*" "**"': tags.operator,
  "FormatReplacement/{ FormatReplacement/} FormatConversion FormatSpec":
    tags.special(tags.brace),
})] }));

// Code takes the font, size and box of the <pre> it sits in: the book's code blocks.
const bookLook = EditorView.theme({
  "&": { fontSize: "inherit", backgroundColor: "transparent" },
  "&.cm-focused": { outline: "none" },
  ".cm-scroller": { fontFamily: "inherit", lineHeight: "inherit", overflowX: "auto" },
  ".cm-content": { padding: "0", caretColor: "currentColor" },
  ".cm-line": { padding: "0" },
  ".cm-activeLine": { backgroundColor: "rgba(91, 139, 208, 0.07)" },
});

// Shift+Enter and Ctrl/Cmd+Enter run the cell, as in Jupyter. Tab indents; Escape then
// Tab leaves the editor (CodeMirror's own way out), so the keyboard is never trapped.
function runKeys(onRun) {
  const run = () => {
    onRun();
    return true;
  };
  return keymap.of([{ key: "Shift-Enter", run }, { key: "Mod-Enter", run }]);
}

export function createEditor(parent, { text, label, onRun, onChange }) {
  const view = new EditorView({
    parent,
    state: EditorState.create({
      doc: text,
      extensions: [
        runKeys(onRun),
        history(),
        drawSelection(),
        highlightActiveLine(),
        indentOnInput(),
        bracketMatching(),
        indentUnit.of("    "),
        EditorState.tabSize.of(4),
        keymap.of([...defaultKeymap, ...historyKeymap, indentWithTab]),
        bookPython,
        syntaxHighlighting(bookColors),
        bookLook,
        EditorView.contentAttributes.of({ "aria-label": label }),
        EditorView.updateListener.of((update) => {
          if (update.docChanged && onChange) onChange(update.state.doc.toString());
        }),
      ],
    }),
  });
  return {
    dom: view.dom,
    getText: () => view.state.doc.toString(),
    setText: (value) => view.dispatch({
      changes: { from: 0, to: view.state.doc.length, insert: value },
    }),
    focus: () => view.focus(),
    // Places the cursor where the reader clicked on the code before the editor existed.
    focusAt: (x, y) => {
      const position = view.posAtCoords({ x, y });
      view.focus();
      if (position !== null) view.dispatch({ selection: { anchor: position } });
    },
    destroy: () => view.destroy(),
  };
}
