// Live cells: every code cell the book marked with data-cell-id gets a Run button and, once
// the reader edits it, an editor (CodeMirror, from editor.js); one Python (Pyodide in
// live/worker.js) runs the cells in reading order. Cells marked data-live="static" say why
// they run only in Jupyter. The chapter's exercises section gets the exercise notebook's code
// questions, each checked against its public tests in a second Python.

const STOPPED = "Stopped. What it printed is kept above; the next run starts a fresh Python.";

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function button(text, label) {
  const node = element("button", "live-button", text);
  node.type = "button";
  if (label) node.setAttribute("aria-label", label);
  return node;
}

// The toolbar's icons, from the Bootstrap Icons font that Quarto ships with every page; on a
// phone they take the place of the buttons' words (live.css), which still name the buttons.
const ICONS = { "Run all": "bi-fast-forward-fill", Stop: "bi-stop-fill",
                Reset: "bi-arrow-counterclockwise" };

function toolButton(text) {
  const node = button("");
  node.classList.add("live-tool");
  const icon = element("i", `bi ${ICONS[text]}`);
  icon.setAttribute("aria-hidden", "true");
  node.append(icon, element("span", "live-tool-label", text));
  return node;
}

// One Python in a worker; `call` sends a request and resolves with its reply. With
// `onPartial`, the request asks for its output while it runs (live/DESIGN.md, "Messages").
class Python {
  constructor(url) {
    this.url = url;
    this.worker = null;
  }

  spawn() {
    this.pending = new Map();
    this.next = 0;
    this.worker = new Worker(this.url, { type: "module" });
    this.worker.onmessage = (event) => {
      const waiting = this.pending.get(event.data.id);
      if (!waiting) return;
      if (event.data.partial) {
        waiting.onPartial?.(event.data.partial);
        return;
      }
      this.pending.delete(event.data.id);
      if (event.data.failed) waiting.reject(new Error(event.data.failed));
      else waiting.resolve(event.data.reply);
    };
    this.worker.onerror = (event) => this.failAll(new Error(
      "Python did not start: " + (event.message || "the worker failed to load")));
  }

  call(message, onPartial) {
    if (!this.worker) this.spawn();
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, onPartial });
      this.worker.postMessage({ ...message, id, stream: Boolean(onPartial) });
    });
  }

  failAll(error) {
    for (const waiting of this.pending.values()) waiting.reject(error);
    this.pending.clear();
  }

  // Terminating is the one way to stop Python mid-loop without cross-origin isolation.
  restart() {
    if (this.worker) this.worker.terminate();
    this.worker = null;
    this.failAll(new Error(STOPPED));
  }
}

// One polite live region for the page: one announcement per finished cell or check, rather
// than one per status change.
class Announcer {
  constructor() {
    this.region = element("div", "live-announcer");
    this.region.setAttribute("role", "status");
    this.region.setAttribute("aria-live", "polite");
    this.region.setAttribute("data-announcer", "");
    document.body.append(this.region);
    this.count = 0;
  }

  say(text) {
    this.count += 1;
    // Cleared first, so that the same words twice are announced twice.
    this.region.textContent = "";
    requestAnimationFrame(() => { this.region.textContent = text; });
  }
}

// A short text for an announcement: the first lines, without the traceback's frames.
function gist(text, lines = 2) {
  const kept = text.trim().split("\n").filter((line) => line.trim());
  return kept.slice(-lines).join(" ").slice(0, 300);
}

// The output area of a cell, filled item by item as the worker sends them.
function appendItems(output, items) {
  for (const item of items) {
    if (item.type === "stream") {
      const last = output.lastElementChild;
      if (last && last.dataset.stream === item.name && !last.nextSibling) {
        last.firstChild.appendData(item.text);
      } else {
        const pre = element("pre", "live-stream", item.text);
        pre.dataset.stream = item.name;
        output.append(pre);
      }
    } else if (item.html) {
      const html = element("div", "live-html");
      html.innerHTML = item.html;
      output.append(html);
      document.dispatchEvent(new CustomEvent("agentbook-live-output"));
    } else {
      output.append(element("pre", "live-result", item.text));
    }
  }
}

function showLeftOut(output, { left_out: count, limit }) {
  if (!count) return;
  const line = output.querySelector(":scope > .live-left-out") || element("p", "live-left-out");
  line.textContent = `… ${count.toLocaleString("en-US")} more characters left out: the page ` +
    `keeps the first ${limit.toLocaleString("en-US")} a cell shows.`;
  output.append(line);  // moved to the end, after what was printed since
}

// The end of a streamed run: every item is on the page already.
function finishOutput(output, reply) {
  showLeftOut(output, reply);
  if (reply.error) output.append(element("pre", "live-error", reply.error));
  output.liveResult = reply;
  output.dataset.status = reply.error ? "error" : "ok";
}

// The editor live.js falls back to where the CodeMirror bundle cannot load: a textarea with
// the same interface as editor.js's createEditor, so a cell never knows which it has.
export function textareaEditor(parent, { text, label, onRun, onChange }) {
  const area = element("textarea", "live-code");
  area.value = text;
  area.spellcheck = false;
  area.setAttribute("aria-label", label);
  const fit = () => { area.rows = Math.max(1, area.value.split("\n").length); };
  let escaped = false;  // Escape, then Tab, leaves the textarea, as it leaves CodeMirror
  area.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.shiftKey || event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      onRun();
    } else if (event.key === "Tab" && !escaped && !event.shiftKey) {
      event.preventDefault();
      area.setRangeText("    ", area.selectionStart, area.selectionEnd, "end");
      area.dispatchEvent(new Event("input"));
    }
    escaped = event.key === "Escape";
  });
  area.addEventListener("input", () => {
    fit();
    if (onChange) onChange(area.value);
  });
  parent.append(area);
  fit();
  return {
    dom: area,
    getText: () => area.value,
    setText: (value) => {
      area.value = value;
      fit();
      if (onChange) onChange(value);
    },
    focus: () => area.focus(),
    focusAt: () => area.focus(),
    destroy: () => area.remove(),
  };
}

// CodeMirror, bundled into live/editor.js at build time; the textarea where it cannot load.
function loadEditor(offset) {
  return import(offset + "live/editor.js").then((module) => module.createEditor,
                                                   () => textareaEditor);
}

class Cell {
  constructor(div, book) {
    this.div = div;
    this.book = book;
    this.id = div.dataset.cellId;
    this.ran = false;
    this.editor = null;  // made when the reader first edits: until then, the book's block
    this.pre = div.querySelector("div.sourceCode pre");
    this.code = this.pre?.querySelector("code");
    this.original = this.code ? this.code.textContent : "";
    this.highlighted = this.code ? this.code.innerHTML : "";
    this.build();
  }

  build() {
    if (this.pre) {
      // The book's own highlighted block, copy button and all, is what the reader sees until
      // they click it or press Enter on it; then an editor takes its place in the same box.
      this.pre.tabIndex = 0;
      this.pre.setAttribute("role", "group");
      this.pre.setAttribute("aria-label", `Code of cell ${this.id}: press Enter to edit`);
      this.pre.addEventListener("mousedown", (event) => {
        if (!this.editor && !event.target.closest("button")) {
          event.preventDefault();
          this.edit(event.clientX, event.clientY);
        }
      });
      this.pre.addEventListener("keydown", (event) => {
        if (!this.editor && event.key === "Enter" && event.target === this.pre) {
          event.preventDefault();
          this.edit();
        }
      });
    }
    this.div.addEventListener("focusin", () => this.book.intent());
    this.run = button("Run", `Run this cell, ${this.id} (Shift+Enter)`);
    this.run.addEventListener("click", () => {
      if (this.running) this.book.stopCells();
      else this.book.runTo(this);
    });
    this.status = element("span", "live-status");
    this.bar = element("div", "live-bar");
    this.bar.append(this.run, this.status);
    this.output = element("div", "live-output");
    this.output.setAttribute("data-live-output", "");
    this.output.setAttribute("aria-label", `Output of cell ${this.id}`);
    this.output.setAttribute("role", "region");
    this.output.hidden = true;
    const source = this.div.querySelector("div.sourceCode");
    (source || this.div.firstChild)?.after(this.bar);
    this.div.append(this.output);
    this.div.classList.add("live-ready");
  }

  // Swaps the static block for an editor holding the same code, in the same <pre>; the hidden
  // <code> beside it follows every edit, so Quarto's copy button copies what is shown.
  async edit(x, y) {
    if (this.editor || !this.pre) return this.editor;
    this.book.intent();
    const create = await this.book.editorReady();
    if (this.editor) return this.editor;
    const holder = element("div", "live-editor");
    this.pre.insertBefore(holder, this.code);
    this.editor = create(holder, {
      text: this.original,
      label: "Code of cell " + this.id,
      onRun: () => this.book.runTo(this),
      onChange: (text) => { this.code.textContent = text; },
    });
    this.code.hidden = true;
    this.pre.classList.add("live-editing");
    this.pre.removeAttribute("tabindex");
    this.pre.removeAttribute("role");
    this.pre.removeAttribute("aria-label");
    if (x === undefined) this.editor.focus();
    else this.editor.focusAt(x, y);
    return this.editor;
  }

  text() {
    return this.editor ? this.editor.getText() : this.original;
  }

  setRunning(running) {
    this.running = running;
    this.run.textContent = running ? "Stop" : "Run";
    this.run.setAttribute("aria-label", running ? `Stop this cell, ${this.id}`
      : `Run this cell, ${this.id} (Shift+Enter)`);
    if (running) this.status.textContent = "running…";
  }

  storedOutputs() {
    return this.div.querySelectorAll(":scope > [class*='cell-output']");
  }

  // Runs the cell, showing what it prints as it prints it; resolves with "done", "error" or
  // "stopped". A stopped cell keeps what it printed, and stays stopped (LiveBook.runTo).
  async execute() {
    this.setRunning(true);
    this.state = "running";
    this.output.removeAttribute("data-status");
    this.output.replaceChildren();
    this.output.hidden = false;
    for (const stored of this.storedOutputs()) stored.hidden = true;
    const onPartial = (partial) => {
      appendItems(this.output, partial.outputs);
      showLeftOut(this.output, partial);
    };
    try {
      const reply = await this.book.python.call({ action: "run", code: this.text(),
                                                  cell: this.id }, onPartial);
      this.ran = true;
      finishOutput(this.output, reply);
      this.state = reply.error ? "error" : "done";
      this.status.textContent = this.state;
      this.book.announce(reply.error ? `Cell ${this.id} raised ${gist(reply.error, 1)}`
        : `Cell ${this.id} done` + (this.output.textContent.trim()
          ? ": " + gist(this.output.textContent) : ""));
    } catch (failure) {
      this.output.append(element("pre", "live-error", failure.message));
      this.output.dataset.status = "error";
      this.state = "stopped";
      this.status.textContent = "stopped";
      this.book.announce(`Cell ${this.id} stopped`);
    } finally {
      this.setRunning(false);
    }
    return this.state;
  }

  // Back to the book: the static block again, as before any edit.
  reset() {
    if (this.editor) {
      this.editor.destroy();
      this.editor = null;
      this.pre.querySelector(".live-editor")?.remove();
      this.code.innerHTML = this.highlighted;
      this.code.hidden = false;
      this.pre.classList.remove("live-editing");
      this.pre.tabIndex = 0;
      this.pre.setAttribute("role", "group");
      this.pre.setAttribute("aria-label", `Code of cell ${this.id}: press Enter to edit`);
    }
    this.ran = false;
    this.state = undefined;
    this.output.hidden = true;
    this.output.replaceChildren();
    this.output.removeAttribute("data-status");
    this.status.textContent = "";
    for (const stored of this.storedOutputs()) stored.hidden = false;
  }
}

// The chapter's Binder and Colab links, for what runs only in Jupyter.
function launchLinks(note) {
  document.querySelectorAll(".launch-links a").forEach((link, index) => {
    if (index) note.append(" · ");
    note.append(link.cloneNode(true));
  });
  return note;
}

function staticNote(div) {
  const note = element("p", "live-static");
  note.append("Runs only in Jupyter: " + (div.dataset.liveReason || "not in the browser") + ". ");
  div.prepend(launchLinks(note));
}

// Tiny markdown for exercise prompts: paragraphs, `code`, **bold**, *italic*.
function promptHtml(markdown) {
  const escape = (text) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  return markdown.split(/\n\s*\n/).map((paragraph) => "<p>" + escape(paragraph)
    .replace(/`([^`]+)`/g, "<code>$1</code>")
    .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
    .replace(/\*([^*\s][^*]*)\*/g, "<em>$1</em>") + "</p>").join("");
}

// Each answer is saved for this tab (sessionStorage, so a reload keeps it) and for the
// browser (localStorage, so a new tab starts from it). When another tab saves an answer
// this tab shows, the tab keeps its own and offers the other one.
class Answers {
  constructor(notebook, onOtherTab) {
    this.prefix = `agentbook:${notebook}:`;
    window.addEventListener("storage", (event) => {
      if (event.storageArea === localStorage && event.key?.startsWith(this.prefix)) {
        onOtherTab(event.key.slice(this.prefix.length), event.newValue);
      }
    });
  }

  load(id, starter) {
    const key = this.prefix + id;
    try {
      return sessionStorage.getItem(key) ?? localStorage.getItem(key) ?? starter;
    } catch {
      return starter;  // storage turned off: nothing was saved
    }
  }

  // False when the browser refuses (storage full or turned off): the answer stays in the
  // editor, and the page says it is not saved.
  save(id, text) {
    try {
      sessionStorage.setItem(this.prefix + id, text);
      localStorage.setItem(this.prefix + id, text);
      return true;
    } catch {
      return false;
    }
  }
}

// "q1b-code" is shown as "q1b".
function questionName(step) {
  return step.id.replace(/-code$/, "");
}

class Exercises {
  constructor(book, data, section) {
    this.book = book;
    this.data = data;
    this.editors = new Map();
    this.blocks = new Map();
    this.stopped = new Set();  // answers a Stop ended: later checks skip them until edited
    this.answers = new Answers(data.notebook, (id, text) => this.otherTab(id, text));
    const box = element("div", "live-exercises");
    box.append(element("h3", "live-exercises-title", "Check your answers here"));
    box.append(element("p", "live-exercises-intro",
      `The code questions of ${data.notebook}, checked against the same public tests as its ` +
      "grader.check cells. Each check runs the notebook from the top, with your answers, " +
      "in a Python of its own; they are kept in this browser."));
    for (const step of data.steps) {
      if (step.kind === "question") box.append(this.question(step));
    }
    section.append(box);
  }

  question(step) {
    const name = questionName(step);
    const block = element("div", "live-exercise");
    block.setAttribute("data-exercise", step.id);
    const prompt = element("div", "live-prompt");
    prompt.innerHTML = promptHtml(step.prompt);
    // The answer shows as a code block like the book's; a click, or Enter, edits it.
    const box = element("div", "sourceCode live-answer");
    const pre = element("pre", "sourceCode python");
    const code = element("code", "sourceCode", this.answers.load(step.id, step.source));
    pre.append(code);
    pre.tabIndex = 0;
    pre.setAttribute("role", "group");
    pre.setAttribute("aria-label", `Your answer to ${name}: press Enter to edit`);
    box.append(pre);
    const note = element("p", "live-note");
    note.setAttribute("data-note", "");
    const feedback = element("pre", "live-feedback");
    feedback.setAttribute("data-feedback", "");
    const bar = element("div", "live-bar");
    const restore = button("Start over", `Start over ${name}: the starter code again`);
    restore.addEventListener("click", () => this.startOver(step));
    const parts = { note, feedback, code };
    if (step.static) {
      const why = element("p", "live-jupyter-only");
      why.append(`Checks only in Jupyter: it ${step.static}. `);
      bar.append(launchLinks(why), restore);
    } else {
      parts.check = button("Check", `Check ${name} (Shift+Enter)`);
      parts.check.addEventListener("click", () => this.clicked(step));
      bar.append(parts.check, restore);
    }
    this.blocks.set(step.id, parts);
    pre.addEventListener("mousedown", (event) => {
      if (!this.editors.has(step.id)) {
        event.preventDefault();
        this.edit(step, pre, event.clientX, event.clientY);
      }
    });
    pre.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && event.target === pre) {
        event.preventDefault();
        this.edit(step, pre);
      }
    });
    block.addEventListener("focusin", () => this.book.intent());
    block.append(prompt, box, bar, note, feedback);
    return block;
  }

  // The answer becomes an editor when the reader first clicks it or presses Enter on it.
  async edit(step, pre, x, y) {
    if (this.editors.has(step.id)) return;
    this.book.intent();
    const create = await this.book.editorReady();
    if (this.editors.has(step.id)) return;
    const { code } = this.blocks.get(step.id);
    for (const name of ["tabindex", "role", "aria-label"]) pre.removeAttribute(name);
    code.remove();
    const editor = create(pre, {
      text: code.textContent,
      label: "Your answer to " + questionName(step),
      // Shift+Enter checks the answer, as it runs a cell.
      onRun: () => (step.static ? undefined : this.clicked(step)),
      onChange: () => this.edited(step),
    });
    this.editors.set(step.id, editor);
    if (x === undefined) editor.focus();
    else editor.focusAt(x, y);
  }

  // An answer's text: from its editor once there is one, else from the block showing it.
  answer(id) {
    const editor = this.editors.get(id);
    return editor ? editor.getText() : this.blocks.get(id).code.textContent;
  }

  // Puts text into an answer, in its editor or in the block showing it, and saves it.
  setAnswer(step, text) {
    const editor = this.editors.get(step.id);
    if (editor) editor.setText(text);
    else this.blocks.get(step.id).code.textContent = text;
    this.edited(step);
  }

  edited(step) {
    this.stopped.delete(step.id);
    if (!this.answers.save(step.id, this.answer(step.id))) {
      this.blocks.get(step.id).note.textContent =
        "This browser did not let the page save this answer: copy it before you leave.";
    }
  }

  // "Start over" can be undone: the answer it replaced is kept until the next edit.
  startOver(step) {
    const before = this.answer(step.id);
    const { note } = this.blocks.get(step.id);
    this.setAnswer(step, step.source);
    note.replaceChildren("Started over from the starter code. ");
    const undo = button("Undo", `Undo starting over ${questionName(step)}`);
    undo.addEventListener("click", () => {
      this.setAnswer(step, before);
      note.replaceChildren("Your answer is back.");
    });
    note.append(undo);
  }

  otherTab(id, text) {
    const found = this.blocks.get(id);
    if (!found || text === null || text === this.answer(id)) return;
    found.note.replaceChildren("Another tab changed this answer; this tab keeps its own. ");
    const use = button("Use the other tab's", `Use the other tab's answer to ${id}`);
    use.addEventListener("click", () => {
      this.setAnswer({ id }, text);
      found.note.replaceChildren();
    });
    found.note.append(use);
  }

  // A Check while this question's check runs stops it; otherwise the check is queued, once.
  clicked(step) {
    const { feedback } = this.blocks.get(step.id);
    this.book.intent();
    if (this.book.checking === step.id) {
      this.book.stopChecks();
      return;
    }
    if (this.book.queuedChecks.has(step.id)) return;
    feedback.removeAttribute("data-status");
    feedback.textContent = this.book.checking ? "waiting for the check that is running…" : "";
    this.book.enqueueCheck(step.id, feedback, () => this.check(step));
  }

  // The set-up cells and answers above this question, its own answer last, as the notebook
  // runs them; what the page cannot run is left out (it carries `static`).
  request(step) {
    const steps = [];
    for (const other of this.data.steps) {
      if (other.kind === "check" || other.static) continue;
      const source = other.kind === "question" ? this.answer(other.id) : other.source;
      steps.push({ kind: other.kind, id: other.id, source });
      if (other.id === step.id) break;
    }
    const { name } = this.data.steps.find((other) => other.kind === "check" &&
                                          other.id === step.id);
    return { name, tests: this.data.tests[name], steps, skip: [...this.stopped] };
  }

  // Runs the check in the checking worker. Another answer that runs longer than
  // book.answerLimit (an endless loop, say) is stopped and skipped, and the check runs again
  // without it; so is one the reader stops with Stop.
  async check(step) {
    const { check, feedback } = this.blocks.get(step.id);
    const name = questionName(step);
    feedback.textContent = "checking…";
    check.textContent = "Stop";
    check.setAttribute("aria-label", `Stop checking ${name}`);
    let running = step.id;
    let since = null;  // when the running step began; the clock starts at the first step
    let overran = null;
    // Every step gets the limit, the question's own answer and its tests too: a function that
    // never returns when a test calls it costs this question only, as it does in Jupyter and
    // in grading, where a time limit sits inside each test (scripts/course/time_limit.py).
    // Loading Python is not a step: after a restart it takes seconds on a slow device.
    const watchdog = setInterval(() => {
      if (since !== null && performance.now() - since > this.book.answerLimit) {
        overran = running;
        this.book.stopChecks();
      }
    }, 250);
    try {
      const reply = await this.book.checker.call(
        { action: "check-question", request: this.request(step) },
        (partial) => { running = partial.step; since = performance.now(); });
      feedback.textContent = checkText(reply);
      feedback.dataset.status = reply.passed ? "pass" : "fail";
      this.book.announce(`Check of ${name}: ` + (reply.passed ? "all tests passed"
        : gist(reply.summary)));
    } catch (failure) {
      // Stopped: the answer that was running is skipped by later checks until edited.
      this.stopped.add(running);
      if (overran && overran !== step.id) {
        clearInterval(watchdog);
        return this.check(step);
      }
      const limit = this.book.answerLimit / 1000;
      feedback.textContent = overran ? `${name}: its answer or its tests did not finish ` +
        `within ${limit} s, so the page restarted the checking Python: look for a loop ` +
        "that never ends, then check again." : `Stopped while running the answer to ` +
        `${running}. Later checks skip that answer until you edit it.`;
      feedback.dataset.status = "fail";
      this.book.announce(`Check of ${name} stopped`);
    } finally {
      clearInterval(watchdog);
      check.textContent = "Check";
      check.setAttribute("aria-label", `Check ${name} (Shift+Enter)`);
    }
  }
}

// What a check found, in the order a reader needs it: what the answer printed, why names may
// be missing, then otter's summary.
function checkText(reply) {
  const parts = [];
  if (reply.printed) parts.push(reply.printed.replace(/\n$/, ""));
  for (const failed of reply.setup || []) {
    parts.push(`The set-up cell ${failed.id} raised an error, so names it defines may be ` +
               `missing:\n${failed.error.replace(/\n$/, "")}`);
  }
  parts.push(...(reply.notes || []));
  parts.push(reply.summary);
  return parts.join("\n");
}

class LiveBook {
  constructor(offset) {
    this.offset = offset;
    const url = new URL(offset + "live/worker.js", document.baseURI);
    this.python = new Python(url);
    this.checker = new Python(url);  // checks run apart from the chapter's cells
    this.queue = Promise.resolve();
    this.checks = Promise.resolve();
    this.generation = 0;
    this.cells = [];
    this.waiting = new Set();
    this.queuedChecks = new Map();
    this.busy = 0;
    this.checking = null;
    this.answerLimit = 10_000;  // ms another answer may run within a check
    this.intended = false;
    this.editorLoading = null;
  }

  // The editor's bundle (about 350 kB) loads with Python, at the first sign of intent.
  editorReady() {
    this.editorLoading ??= loadEditor(this.offset);
    return this.editorLoading;
  }

  build() {
    this.announcer = new Announcer();
    for (const div of document.querySelectorAll("div.cell[data-cell-id]")) {
      if (div.dataset.live === "static") staticNote(div);
      else this.cells.push(new Cell(div, this));
    }
    this.toolbar();
    this.exercises();
  }

  // Python loads at the reader's first sign of intent (focus in a cell, Run, Check, Run
  // all), not with the page: a reader who only reads downloads none of its 14 MB.
  intent() {
    if (this.intended) return;
    this.intended = true;
    this.editorReady();
    this.warm();
  }

  announce(text) {
    this.announcer.say(text);
  }

  warm(why = "Python is loading (about 14 MB, once; the browser keeps it)") {
    this.say(why + "…");
    const generation = this.generation;
    this.python.call({ action: "load" }).then(() => {
      if (generation === this.generation) this.idle();
    }, () => undefined);
  }

  // The toolbar says "ready" only when nothing runs.
  idle(text = "Python is ready: run any cell, or Run all.") {
    if (!this.busy && !this.checking) this.say(text);
  }

  toolbar() {
    const bar = element("div", "live-toolbar");
    bar.setAttribute("role", "toolbar");
    bar.setAttribute("aria-label", "Live cells");
    const runAll = toolButton("Run all");
    const stop = toolButton("Stop");
    const reset = toolButton("Reset");
    this.state = element("span", "live-state",
      "Python loads when you first run or edit a cell (14 MB, once).");
    this.state.setAttribute("data-live-state", "");
    runAll.addEventListener("click", () => {
      this.intent();
      this.runAll();
    });
    stop.addEventListener("click", () => this.stop());
    reset.addEventListener("click", () => this.reset());
    bar.append(runAll, stop, reset, this.state);
    const anchor = document.querySelector(".launch-links") || document.querySelector("main h1");
    if (anchor) anchor.after(bar);
    else document.querySelector("main")?.prepend(bar);
    keepOffsetsCurrent(bar);
    revealTarget(bar);
  }

  async exercises() {
    // A chapter's exercises section is labelled sec-exercises or sec-<topic>-exercises.
    const section = document.querySelector("section[id^='sec-'][id$='exercises']");
    if (!section) return;
    const page = location.pathname.split("/").pop().replace(/\.html$/, "");
    const response = await fetch(this.offset + "live/exercises/" + page + ".json");
    if (response.ok) this.exerciseBlock = new Exercises(this, await response.json(), section);
  }

  say(text) {
    this.state.textContent = text;
  }

  // Runs one job after another; a stop drops every job queued before it.
  enqueue(job) {
    const generation = this.generation;
    const run = async () => {
      if (generation !== this.generation) return;
      this.busy += 1;
      try {
        await job();
      } finally {
        this.busy -= 1;
      }
    };
    this.queue = this.queue.then(run, run).catch(() => undefined);
    return this.queue;
  }

  // Checks queue apart from the chapter's cells, in their own worker.
  enqueueCheck(id, feedback, job) {
    const generation = this.generation;
    const entry = { feedback };  // this request's own, so a stale run deletes only itself
    this.queuedChecks.set(id, entry);
    const run = async () => {
      if (this.queuedChecks.get(id) === entry) this.queuedChecks.delete(id);
      if (generation !== this.generation) return;
      this.checking = id;
      this.say(`checking ${id}…`);
      try {
        await job();
      } finally {
        this.checking = null;
        this.idle("ready");
      }
    };
    this.checks = this.checks.then(run, run).catch(() => undefined);
    return this.checks;
  }

  wait(cell) {
    cell.output.removeAttribute("data-status");
    cell.status.textContent = "waiting…";
    this.waiting.add(cell);
  }

  started(cell) {
    this.waiting.delete(cell);
  }

  // Runs the cells above that have not run, then the cell. A cell above that was stopped is
  // not started again, and one that raises ends the run: the cell says so and offers to run
  // from the top.
  runTo(cell) {
    this.intent();
    this.wait(cell);
    return this.enqueue(async () => {
      this.started(cell);
      for (const above of this.cells.slice(0, this.cells.indexOf(cell))) {
        if (above.ran) continue;
        if (above.state === "stopped") return this.blocked(cell, above, "was stopped");
        this.say(`running cell ${above.id} first…`);
        if (await above.execute() !== "done") {
          return this.blocked(cell, above, above.state === "error" ? "raised an error"
            : "was stopped");
        }
      }
      this.say(`running cell ${cell.id}…`);
      await cell.execute();
      this.idle("ready");
    });
  }

  blocked(cell, above, what) {
    cell.status.replaceChildren(`not run: cell ${above.id} above ${what}. `);
    const again = button("Run from the top", `Run from the top to cell ${cell.id}`);
    again.addEventListener("click", () => this.runAll(cell));
    cell.status.append(again);
    this.say(`cell ${above.id} ${what}`);
    this.announce(`Cell ${cell.id} not run: cell ${above.id} above ${what}`);
  }

  // Like Jupyter's "Restart and run all": a fresh interpreter, then every cell in order, to
  // `last` if given, ending at the first cell that raises. A second click while it runs is
  // ignored.
  runAll(last = null) {
    if (this.runningAll) return this.queue;
    const token = {};
    if (this.cells.some((cell) => cell.ran || cell.state)) this.restart();
    this.runningAll = token;
    const cells = last ? this.cells.slice(0, this.cells.indexOf(last) + 1) : this.cells;
    for (const cell of cells) this.wait(cell);
    return this.enqueue(async () => {
      for (const [index, cell] of cells.entries()) {
        this.started(cell);
        this.say(`running cell ${cell.id}…`);
        const state = await cell.execute();
        if (state !== "done") {
          const why = state === "error" ? "raised an error" : "was stopped";
          for (const after of cells.slice(index + 1)) {
            this.started(after);
            after.status.textContent = `not run: cell ${cell.id} ${why}`;
          }
          this.say(`stopped at cell ${cell.id}, which ${why}`);
          return;
        }
      }
      this.say(last ? `ran every cell to ${last.id}` : "ran every cell");
    }).finally(() => {
      if (this.runningAll === token) this.runningAll = null;
    });
  }

  restart() {
    this.generation += 1;
    this.queue = Promise.resolve();
    this.runningAll = null;
    this.python.restart();
    for (const cell of this.cells) cell.ran = false;
    for (const cell of this.waiting) cell.status.textContent = "not run: stopped";
    this.waiting.clear();
  }

  // Stops the running check; the next one queued runs in a fresh worker.
  stopChecks() {
    this.checker.restart();
  }

  // A cell's Stop: the chapter's Python only, so a check in progress goes on.
  stopCells() {
    this.restart();
    if (this.intended) this.warm("Stopped. A fresh Python is starting");
  }

  // The toolbar's Stop: the chapter's Python and the checks, queued ones too. A fresh
  // Python starts at once; a run after it reruns the cells above first.
  stop() {
    for (const { feedback } of this.queuedChecks.values()) {
      feedback.textContent = "not checked: stopped";
    }
    this.queuedChecks.clear();
    this.stopCells();  // a new generation: the queued checks do not start
    this.stopChecks();
  }

  reset() {
    this.restart();
    for (const cell of this.cells) cell.reset();
    if (this.intended) this.warm("Reset to the book's code. A fresh Python is starting");
    else this.say("Reset to the book's code.");
  }
}

// A link's target lands below the sticky toolbar: live.css pads the page's scrolling by the
// toolbar's height, and on a narrow screen by Quarto's header above it too, which this keeps
// current as either changes size (the status line wraps, the window turns).
function keepOffsetsCurrent(bar) {
  const header = document.querySelector("#quarto-header");
  const root = document.documentElement.style;
  const update = () => {
    root.setProperty("--live-toolbar-height", `${bar.getBoundingClientRect().height}px`);
    root.setProperty("--live-header-height",
      `${header ? header.getBoundingClientRect().height : 0}px`);
  };
  update();
  const observer = new ResizeObserver(update);
  observer.observe(bar);
  if (header) observer.observe(header);
}

// A page opened at a fragment (a link from another page, a search result) was scrolled to its
// target before the toolbar and the cells' Run buttons existed. Scroll again if the toolbar
// now covers the target, or if the buttons above it pushed it out of the window: the browser
// holds a fragment in place only while the page loads, and this module may arrive later.
function revealTarget(bar) {
  const id = decodeURIComponent(location.hash.slice(1));
  const target = id && document.getElementById(id);
  if (!target) return;
  const top = target.getBoundingClientRect().top;
  const covered = top > -1 && top < bar.getBoundingClientRect().bottom;
  if (covered || top >= innerHeight) {
    target.scrollIntoView({ block: "start", behavior: "instant" });
  }
}

export function start(offset) {
  if (typeof WebAssembly !== "object" || typeof Worker !== "function") {
    const line = element("p", "live-off",
      "This browser cannot run WebAssembly, so this page is the static book.");
    document.querySelector("main")?.prepend(line);
    return;
  }
  const book = new LiveBook(offset);
  book.build();
  window.agentbookLive = book;
}
