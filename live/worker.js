// The page's Python: Pyodide in a Web Worker, so that a cell that never ends blocks only this
// worker, which the page can terminate and replace. Everything it loads comes from the book's
// own live/ folder: Pyodide's core, the agentbook wheel and runner.py. The messages it
// answers are listed in live/DESIGN.md ("Messages").
import { loadPyodide } from "./pyodide/pyodide.mjs";

const here = new URL("./", import.meta.url);

async function start() {
  const pyodide = await loadPyodide({ indexURL: new URL("pyodide/", here).href });
  const { wheel } = await (await fetch(new URL("wheel.json", here))).json();
  const archive = await (await fetch(new URL(wheel, here))).arrayBuffer();
  pyodide.unpackArchive(archive, "wheel");
  const runner = await (await fetch(new URL("runner.py", here))).text();
  pyodide.FS.writeFile("/home/pyodide/agentbook_live.py", runner);
  const module = pyodide.pyimport("agentbook_live");
  // From here on no cell can import the runner, and checks restore this state.
  pyodide.FS.unlink("/home/pyodide/agentbook_live.py");
  module.seal();
  return module;
}

const ready = start();

// What a request asks the runner for; the reply is JSON text, or a promise of it when a
// cell awaits at top level.
function answer(runner, data, send) {
  const { action, code, cell, request } = data;
  if (action === "load") return "{}";
  if (action === "run") return runner.run(code, cell, undefined, send);
  if (action === "check-question") return runner.check_question(JSON.stringify(request), send);
  throw new Error("unknown action " + action);
}

self.onmessage = async (event) => {
  const { id, stream } = event.data;
  // With `stream`, what the cell prints arrives while it runs, in batches.
  const send = stream ? (text) => self.postMessage({ id, partial: JSON.parse(text) }) : undefined;
  try {
    const runner = await ready;
    const reply = await answer(runner, event.data, send);
    self.postMessage({ id, reply: JSON.parse(reply) });
  } catch (failure) {
    self.postMessage({ id, failed: String(failure) });
  }
};
