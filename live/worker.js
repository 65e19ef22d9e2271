// The page's Python: Pyodide in a Web Worker, so that a cell that never ends blocks only this
// worker, which the page can terminate and replace. Everything it loads comes from the book's
// own live/ folder: Pyodide's core, the agentbook wheel and runner.py.
import { loadPyodide } from "./pyodide/pyodide.mjs";

const here = new URL("./", import.meta.url);

async function start() {
  const pyodide = await loadPyodide({ indexURL: new URL("pyodide/", here).href });
  const { wheel } = await (await fetch(new URL("wheel.json", here))).json();
  const archive = await (await fetch(new URL(wheel, here))).arrayBuffer();
  pyodide.unpackArchive(archive, "wheel");
  const runner = await (await fetch(new URL("runner.py", here))).text();
  pyodide.FS.writeFile("/home/pyodide/agentbook_live.py", runner);
  return pyodide.pyimport("agentbook_live");
}

const ready = start();

self.onmessage = async (event) => {
  const { id, action, code, cell, name, source } = event.data;
  try {
    const runner = await ready;
    let reply;
    if (action === "load") {
      reply = "{}";
    } else if (action === "run") {
      reply = runner.run(code, cell);
    } else if (action === "exercise") {
      reply = runner.run_exercise(code, cell);
    } else if (action === "reset-exercises") {
      runner.reset_exercises();
      reply = "{}";
    } else if (action === "check") {
      reply = JSON.stringify({ summary: runner.check(name, source) });
    }
    self.postMessage({ id, reply: JSON.parse(reply) });
  } catch (failure) {
    self.postMessage({ id, failed: String(failure) });
  }
};
