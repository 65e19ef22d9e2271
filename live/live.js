// Live cells: every code cell the book marked with data-cell-id gets a Run button and, once
// the reader edits it, an editor (CodeMirror, from editor.js); one Python (Pyodide in
// live/worker.js) runs the cells in reading order. Cells marked data-live="static" say why they run only in Jupyter. The chapter's exercises section gets
// the exercise notebook's code questions, checked against their public tests.

const STOPPED = "Stopped: the interpreter was restarted, so every cell runs again.";

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

// One Python in a worker; `call` sends a request and resolves with its reply.
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
      this.pending.delete(event.data.id);
      if (!waiting) return;
      if (event.data.failed) waiting.reject(new Error(event.data.failed));
      else waiting.resolve(event.data.reply);
    };
    this.worker.onerror = (event) => this.failAll(new Error(
      "Python did not start: " + (event.message || "the worker failed to load")));
  }

  call(message) {
    if (!this.worker) this.spawn();
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ ...message, id });
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

function showOutput(output, reply) {
  output.replaceChildren();
  const text = (reply.stdout || "") + (reply.stderr || "");
  if (text) output.append(element("pre", "live-stream", text));
  if (reply.html) {
    const html = element("div", "live-html");
    html.innerHTML = reply.html;
    output.append(html);
    document.dispatchEvent(new CustomEvent("agentbook-live-output"));
  } else if (reply.text !== null && reply.text !== undefined) {
    output.append(element("pre", "live-result", reply.text));
  }
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
    this.run = button("Run", "Run this cell (Shift+Enter)");
    this.run.addEventListener("click", () => {
      if (this.running) this.book.stop();
      else this.book.runTo(this);
    });
    this.status = element("span", "live-status");
    this.status.setAttribute("aria-live", "polite");
    this.bar = element("div", "live-bar");
    this.bar.append(this.run, this.status);
    this.output = element("div", "live-output");
    this.output.setAttribute("data-live-output", "");
    this.output.setAttribute("aria-live", "polite");
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
    this.run.setAttribute("aria-label", running ? "Stop this cell" : "Run this cell (Shift+Enter)");
    this.status.textContent = running ? "running…" : this.status.textContent;
  }

  storedOutputs() {
    return this.div.querySelectorAll(":scope > [class*='cell-output']");
  }

  async execute() {
    this.setRunning(true);
    this.output.removeAttribute("data-status");
    try {
      const reply = await this.book.python.call({ action: "run", code: this.text(),
                                                  cell: this.id });
      this.ran = true;
      for (const stored of this.storedOutputs()) stored.hidden = true;
      this.output.hidden = false;
      showOutput(this.output, reply);
      this.status.textContent = reply.error ? "error" : "done";
      return !reply.error;
    } catch (failure) {
      this.output.hidden = false;
      showOutput(this.output, { error: failure.message });
      this.status.textContent = "stopped";
      throw failure;
    } finally {
      this.setRunning(false);
    }
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
    this.output.hidden = true;
    this.output.replaceChildren();
    this.output.removeAttribute("data-status");
    this.status.textContent = "";
    for (const stored of this.storedOutputs()) stored.hidden = false;
  }
}

function staticNote(div) {
  const note = element("p", "live-static");
  note.append("Runs only in Jupyter: " + (div.dataset.liveReason || "not in the browser") + ". ");
  const links = document.querySelectorAll(".launch-links a");
  links.forEach((link, index) => {
    if (index) note.append(" · ");
    note.append(link.cloneNode(true));
  });
  div.prepend(note);
}

// Tiny markdown for exercise prompts: paragraphs, `code`, **bold**, *italic*.
function promptHtml(markdown) {
  const escape = (text) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  return markdown.split(/\n\s*\n/).map((paragraph) => "<p>" + escape(paragraph)
    .replace(/`([^`]+)`/g, "<code>$1</code>")
    .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
    .replace(/\*([^*\s][^*]*)\*/g, "<em>$1</em>") + "</p>").join("");
}

class Exercises {
  constructor(book, data, section) {
    this.book = book;
    this.data = data;
    this.editors = new Map();
    const box = element("div", "live-exercises");
    box.append(element("h3", "live-exercises-title", "Check your answers here"));
    box.append(element("p", "live-exercises-intro",
      `The code questions of ${data.notebook}, checked against the same public tests as its ` +
      "grader.check cells. Each check runs the notebook from the top, with your answers; " +
      "they are kept in this browser."));
    for (const step of data.steps) {
      if (step.kind === "question") box.append(this.question(step));
    }
    section.append(box);
  }

  key(id) {
    return `agentbook:${this.data.notebook}:${id}`;
  }

  question(step) {
    const block = element("div", "live-exercise");
    block.setAttribute("data-exercise", step.id);
    const prompt = element("div", "live-prompt");
    prompt.innerHTML = promptHtml(step.prompt);
    // The answer shows as a code block like the book's; a click, or Enter, edits it.
    const box = element("div", "sourceCode live-answer");
    const pre = element("pre", "sourceCode python");
    const code = element("code", "sourceCode", this.saved(step));
    pre.append(code);
    pre.tabIndex = 0;
    pre.setAttribute("role", "group");
    pre.setAttribute("aria-label", `Your answer to ${step.id}: press Enter to edit`);
    box.append(pre);
    const check = button("Check");
    const restore = button("Start over", "Start over: the starter code again");
    const feedback = element("pre", "live-feedback");
    feedback.setAttribute("data-feedback", "");
    feedback.setAttribute("aria-live", "polite");
    const checkThis = () => {
      this.book.intent();
      this.book.enqueue(() => this.check(step, feedback));
    };
    const edit = async (x, y) => {
      if (this.editors.has(step.id)) return;
      this.book.intent();
      const create = await this.book.editorReady();
      if (this.editors.has(step.id)) return;
      pre.removeAttribute("tabindex");
      pre.removeAttribute("role");
      pre.removeAttribute("aria-label");
      code.remove();
      const editor = create(pre, {
        text: this.saved(step),
        label: "Your answer to " + step.id,
        onRun: checkThis,
        onChange: (text) => localStorage.setItem(this.key(step.id), text),
      });
      this.editors.set(step.id, editor);
      if (x === undefined) editor.focus();
      else editor.focusAt(x, y);
    };
    pre.addEventListener("mousedown", (event) => {
      if (!this.editors.has(step.id)) {
        event.preventDefault();
        edit(event.clientX, event.clientY);
      }
    });
    pre.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && event.target === pre) {
        event.preventDefault();
        edit();
      }
    });
    block.addEventListener("focusin", () => this.book.intent());
    check.addEventListener("click", checkThis);
    restore.addEventListener("click", () => {
      this.editors.get(step.id)?.setText(step.source);
      code.textContent = step.source;
      localStorage.removeItem(this.key(step.id));
    });
    const bar = element("div", "live-bar");
    bar.append(check, restore);
    block.append(prompt, box, bar, feedback);
    return block;
  }

  saved(step) {
    return localStorage.getItem(this.key(step.id)) ?? step.source;
  }

  answer(step) {
    const editor = this.editors.get(step.id);
    return editor ? editor.getText() : this.saved(step);
  }

  // The notebook from the top, with the page's answers, up to this question's check.
  async check(step, feedback) {
    feedback.textContent = "checking…";
    feedback.removeAttribute("data-status");
    const python = this.book.python;
    let printed = "";
    try {
      await python.call({ action: "reset-exercises" });
      for (const other of this.data.steps) {
        if (other.kind === "check" && other.id === step.id) {
          const { summary } = await python.call({ action: "check", name: other.name,
                                                  source: this.data.tests[other.name] });
          feedback.textContent = printed + summary;
          feedback.dataset.status = summary.includes("All test cases passed") ? "pass" : "fail";
          return;
        }
        if (other.kind === "check") continue;
        const code = other.kind === "question" ? this.answer(other) : other.source;
        const reply = await python.call({ action: "exercise", code, cell: other.id });
        if (other.id === step.id) {
          printed = (reply.stdout || "") + (reply.stderr || "") + (reply.error || "");
          printed += printed && !printed.endsWith("\n") ? "\n" : "";
        }
      }
    } catch (failure) {
      feedback.textContent = failure.message;
      feedback.dataset.status = "fail";
    }
  }
}

class LiveBook {
  constructor(offset) {
    this.offset = offset;
    this.python = new Python(new URL(offset + "live/worker.js", document.baseURI));
    this.queue = Promise.resolve();
    this.generation = 0;
    this.cells = [];
    this.intended = false;
    this.editorLoading = null;
  }

  // The editor's bundle (about 350 kB) loads with Python, at the first sign of intent.
  editorReady() {
    this.editorLoading ??= loadEditor(this.offset);
    return this.editorLoading;
  }

  build() {
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

  warm(why = "Python is loading (about 14 MB, once; the browser keeps it)") {
    this.say(why + "…");
    const generation = this.generation;
    this.python.call({ action: "load" }).then(() => {
      if (generation === this.generation && !this.cells.some((cell) => cell.running)) {
        this.say("Python is ready: run any cell, or Run all.");
      }
    }, () => undefined);
  }

  toolbar() {
    const bar = element("div", "live-toolbar");
    bar.setAttribute("role", "toolbar");
    bar.setAttribute("aria-label", "Live cells");
    const runAll = button("Run all");
    const stop = button("Stop");
    const reset = button("Reset");
    this.state = element("span", "live-state",
      "The cells run in this page: Python loads when you first edit or run one " +
      "(about 14 MB, once).");
    this.state.setAttribute("aria-live", "polite");
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
    const run = () => (generation === this.generation ? job() : undefined);
    this.queue = this.queue.then(run, run).catch(() => undefined);
    return this.queue;
  }

  runTo(cell) {
    this.intent();
    cell.output.removeAttribute("data-status");
    cell.status.textContent = "waiting…";
    return this.enqueue(async () => {
      const index = this.cells.indexOf(cell);
      for (const above of this.cells.slice(0, index)) {
        if (!above.ran) {
          this.say(`running cell ${above.id} first…`);
          await above.execute();
        }
      }
      this.say(`running cell ${cell.id}…`);
      await cell.execute();
      this.say("ready");
    });
  }

  // Like Jupyter's "Restart and run all": a fresh interpreter, then every cell in order.
  runAll() {
    if (this.cells.some((cell) => cell.ran)) this.restart();
    return this.enqueue(async () => {
      for (const cell of this.cells) {
        this.say(`running cell ${cell.id}…`);
        await cell.execute();
      }
      this.say("ran every cell");
    });
  }

  restart() {
    this.generation += 1;
    this.queue = Promise.resolve();
    this.python.restart();
    for (const cell of this.cells) cell.ran = false;
  }

  // Both start a fresh Python at once; a run after them reruns the cells above it first.
  stop() {
    this.restart();
    if (this.intended) this.warm("Stopped. A fresh Python is starting");
  }

  reset() {
    this.restart();
    for (const cell of this.cells) cell.reset();
    if (this.intended) this.warm("Reset to the book's code. A fresh Python is starting");
    else this.say("Reset to the book's code.");
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
