"""Time what the book's speed targets are about; rerun it and quote medians.

    python -m scripts.checks.bench chapter|tests|commands|import|loop|live|sandbox|provenance
        [--runs N]
    python -m scripts.checks.bench mcp [--runs N] [--json figures/mcp-cost.json]
    python -m scripts.checks.bench frameworks [--runs N] [--json figures/frameworks-bench.json]
    python -m scripts.checks.bench grading [--count 200] [--workers N] [--csv FILE]
                                            [--timeout 60] [--test-timeout 10]
    python -m scripts.checks.bench correct --against DIR [--runs 9]
    python -m scripts.checks.bench hostile [--timeout 60] [--test-timeout 10] [--workers N]

Targets (2 cores): set-up under 40 s and the suite under 30 s (commands: fresh clones, empty
caches); a chapter under 10 s; `import agentbook` within 45 ms of `python -c pass` (Chapter
1's kernel only: the later chapters' modules load on first use); run_agent within 1.3 times
the seed's bare loop at 4, 32 and 128 turns, its cost per turn flat. In the page (live,
render first): a reader who never runs a cell downloads at most 2 MB per chapter page; from
the first click on a cold page the first output arrives within 6 s, and within 3 s with
Python in the browser's cache. grading reports submissions a minute and the slowest
submission for a class copied from the fixture submissions, 5% of them one whose function
never returns, graded as `grading class` grades without Docker.
sandbox reports what one run of a short program in Chapter 3's sandbox costs, against starting
the same interpreter bare.
provenance: one check of a value against a 100 kB untrusted result built to make a
backtracking search retry at every word, or a repeated search re-read the same letters, each
under 0.1 s; and ten values checked after a run read 100 results of 14 kB, under 1 s, and
again in the same run (each text read once a run), under 0.1 s.
correct grades the correct submission with this checkout and with another (DIR, such as the
main branch before a change to grading), alternating, each with the autograder zip its own
code builds: a correct submission should grade no more than 10% slower after a change.
hostile grades the correct submission, the one that never returns and every hostile one with
the class command and in Gradescope's layout, and says what each scored, how long it took and
what was left running: each hang should cost only its question, within the limits, a
tampered submission nothing, and nothing should be left running.
mcp measures what Chapter 4 reports and has no target: one call over stdio to the desk's MCP
server against the same call in process, and starting and stopping the server;
`python3 dev.py book` writes its results into figures/ for the chapter to read. frameworks
measures what Chapter 4 reports beside the kernel, with no target either: each framework's
import time (beyond `python -c pass`) and peak memory in fresh interpreters, and the
distributions its import loads; `python3 dev.py book` writes them into figures/ too.
Shared machines are noisy: it reports the median and spread, and for commands the processor
time too, which load inflates less.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dev import PYTEST_SPREAD
from scripts.build.regenerate import ROOT, execute
from scripts.build.save import find_notebooks
from scripts.checks.measure_pages import CHROMIUM_FLAGS, find_chromium

# What the reference's kernel imports: the standard library only.
STDLIB_KERNEL_IMPORTS = "import json, dataclasses, enum, collections, typing"
# Heavy packages that importing the book's package should not pull in.
HEAVY_MODULES = ("httpx", "matplotlib", "pandas")
SET_UP = "import dev; dev.set_up()"


def timed(action: Callable[[], object]) -> float:  # seconds on the clock
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def report(label: str, seconds: list[float], unit: str = "s", scale: float = 1.0) -> None:
    shown = [value * scale for value in seconds]
    spread = f"  min {min(shown):.2f} {unit}, max {max(shown):.2f} {unit}" if len(shown) > 1 else ""
    print(f"{label:44} median {statistics.median(shown):7.2f} {unit}  over {len(shown)} run(s)"
          f"{spread}", flush=True)


def bench_chapters(runs: int) -> None:
    """Execute each chapter where it cannot touch the repository (no figures/ beside it)."""
    with tempfile.TemporaryDirectory() as scratch:
        for notebook in find_notebooks(ROOT):
            copy = Path(scratch, "chapters", notebook.name)
            copy.parent.mkdir(exist_ok=True)
            seconds = []
            for _ in range(runs):
                shutil.copy(notebook, copy)
                seconds.append(timed(lambda copy=copy: execute(copy)))
            report(f"execute {notebook.relative_to(ROOT)}", seconds)


def bench_tests(runs: int) -> None:
    """The suite as `dev.py test` runs it (on every core), and on one core for comparison."""
    serial = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    for label, command in [("pytest -n auto (as dev.py test runs it)",
                            [*serial, *PYTEST_SPREAD]),
                           ("pytest on one core", serial)]:
        seconds = [timed(lambda command=command: subprocess.run(
            command, cwd=ROOT, check=True, capture_output=True)) for _ in range(runs)]
        report(label, seconds)


@dataclass
class Timing:
    """One command's time on the clock and the processor time it and its children used."""

    wall: float
    cpu: float
    status: int
    output: str


def run_timed(command: list[str], cwd: Path, environment: dict[str, str]) -> Timing:
    # Processor time (user and system) is counted over finished child processes.
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return Timing(wall, cpu, done.returncode, done.stdout + done.stderr)


def clone_and_time(python: str, installer: str, scratch: Path) -> Iterator[tuple[str, Timing]]:
    """Clone the committed book, then time set-up with empty caches and the test command."""
    clone = scratch / "agentbook"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    # Empty caches: nothing downloaded before may be reused, by pip (which installs uv) or uv.
    environment = {**os.environ, "UV_CACHE_DIR": str(scratch / "uv-cache"),
                   "PIP_CACHE_DIR": str(scratch / "pip-cache")}
    if installer == "pip":
        environment["AGENTBOOK_INSTALLER"] = "pip"
    yield "set-up", run_timed([python, "-c", SET_UP], clone, environment)
    for attempt in ("test, right after set-up", "test, repeat"):
        yield attempt, run_timed([python, "dev.py", "test"], clone, environment)


def bench_commands(python: str, runs: int, installer: str) -> None:
    """Time set-up and `dev.py test` on `runs` fresh clones; report medians of each step."""
    steps: dict[str, list[Timing]] = {}
    for run in range(1, runs + 1):
        with tempfile.TemporaryDirectory() as scratch:
            for step, timing in clone_and_time(python, installer, Path(scratch)):
                steps.setdefault(step, []).append(timing)
                print(f"clone {run}: {step:28} {timing.wall:7.2f} s on the clock, "
                      f"{timing.cpu:7.2f} s of processor, exit {timing.status}", flush=True)
                if timing.status != 0:
                    print(timing.output[-3000:], flush=True)
    for step, timings in steps.items():
        report(f"{step} ({installer})", [timing.wall for timing in timings])
        report(f"{step} ({installer}), processor time", [timing.cpu for timing in timings])


def interpreter_time(python: str, code: str, write_bytecode: bool = False) -> tuple[float, float]:
    """Seconds on the clock and of processor for a fresh interpreter to run `code` and exit;
    with `write_bytecode`, it writes the bytecode caches even where the environment says not to
    (PYTHONDONTWRITEBYTECODE), so that the runs after it read them."""
    environment = dict(os.environ)
    if write_bytecode:
        environment.pop("PYTHONDONTWRITEBYTECODE", None)
    timing = run_timed([python, "-c", code], ROOT, environment)
    if timing.status != 0:
        raise SystemExit(f"python -c {code!r} failed:\n{timing.output}")
    return timing.wall, timing.cpu


def bench_import(python: str, runs: int) -> None:
    """Import time of the package in fresh interpreters against two baselines, the cases
    interleaved so that a burst of load elsewhere falls on all of them alike."""
    cases = {"python -c pass": "pass",
             "stdlib-only kernel imports": STDLIB_KERNEL_IMPORTS,
             "import agentbook": "import agentbook",
             "from agentbook import *": "from agentbook import *"}
    for code in cases.values():  # warm up: bytecode caches written, files in memory
        interpreter_time(python, code, write_bytecode=True)
    pairs: dict[str, list[tuple[float, float]]] = {label: [] for label in cases}
    for _ in range(runs):
        for label, code in cases.items():
            pairs[label].append(interpreter_time(python, code))
    for index, kind in enumerate(("clock", "processor")):
        seconds = {label: [pair[index] for pair in timings] for label, timings in pairs.items()}
        for label, values in seconds.items():
            report(f"{label} ({kind})", values, "ms", 1000)
        baseline = statistics.median(seconds["python -c pass"])
        for label in ("stdlib-only kernel imports", "import agentbook"):
            extra = (statistics.median(seconds[label]) - baseline) * 1000
            print(f"{label + ' minus pass (' + kind + ')':44} {extra:7.2f} ms"
                  + ("  (target 45 ms)" if label == "import agentbook" else ""), flush=True)
    probe = (f"import sys, agentbook; print(sorted(m for m in {HEAVY_MODULES!r}"
             " if m in sys.modules), sorted(m for m in sys.modules if m.startswith('agentbook.')))")
    loaded = subprocess.run([python, "-c", probe], check=True, capture_output=True, text=True)
    heavy, chapters = loaded.stdout.strip().split("] [")
    print(f"{'heavy modules that import agentbook loads':44} {heavy}]", flush=True)
    print(f"{'chapter modules that import agentbook loads':44} [{chapters}", flush=True)


def bench_sandbox(runs: int) -> None:
    """One run of `print(1)` in Chapter 3's sandbox, against the same interpreter started bare
    (`-I -S`), the two interleaved so that load elsewhere falls on both alike."""
    from agentbook.untrusted import SandboxLimits, _python_files, run_sandboxed, sandbox_problem

    if (problem := sandbox_problem()) is not None:
        raise SystemExit(f"no sandbox here: {problem}")
    python, limits = _python_files()[0], SandboxLimits()
    cases: dict[str, Callable[[], object]] = {
        "python -I -S -c 'print(1)'": lambda: subprocess.run(
            [python, "-I", "-S", "-c", "print(1)"], check=True, capture_output=True),
        "run_sandboxed('print(1)')": lambda: run_sandboxed("print(1)", limits),
    }
    seconds: dict[str, list[float]] = {label: [] for label in cases}
    for _ in range(runs):
        for label, action in cases.items():
            seconds[label].append(timed(action))
    for label, values in seconds.items():
        report(label, values, "ms", 1000)
    ratio = statistics.median(seconds["run_sandboxed('print(1)')"]) / statistics.median(
        seconds["python -I -S -c 'print(1)'"])
    print(f"{'sandboxed over bare':44} {ratio:7.2f} times", flush=True)


# What Chapter 4 imports of each framework, beside what the kernel needs.
FRAMEWORK_IMPORTS = {
    "agentbook (the kernel)": "import agentbook",
    "OpenAI Agents SDK": "import agents",
    "PydanticAI": "import pydantic_ai, pydantic_ai.models.function",
    "LangGraph": "import langgraph.graph, langgraph.prebuilt, "
                 "langchain_core.language_models.chat_models",
}
# A child's own peak resident memory in kilobytes, printed as its last line: Linux's VmHWM,
# which starts afresh with the new program, where ru_maxrss would keep the peak of the
# benchmark's own process that forked it; ru_maxrss elsewhere.
PEAK_MEMORY = """
import re, resource
try:
    with open("/proc/self/status") as status:
        print(re.search(r"VmHWM:\\s+(\\d+)", status.read()).group(1))
except OSError:
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""
# The distributions whose modules a child has imported, and their installed size in bytes.
LOADED_DISTRIBUTIONS = """
import json, sys, importlib.metadata as metadata
owners = metadata.packages_distributions()
names = sorted({d for m in list(sys.modules) for d in owners.get(m.split(".")[0], [])})
size = sum(f.locate().stat().st_size for n in names for f in metadata.distribution(n).files or []
           if f.locate().is_file())
print(json.dumps([names, size]))
"""


def peak_and_time(python: str, code: str) -> tuple[float, float]:
    """Seconds on the clock for a fresh interpreter to run `code`, and its peak memory in MB."""
    started = time.perf_counter()
    done = subprocess.run([python, "-c", code + PEAK_MEMORY], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    wall = time.perf_counter() - started
    return wall, int(done.stdout.splitlines()[-1]) / 1024


def bench_frameworks(python: str, runs: int, json_path: Path | None) -> None:
    """Import time and peak memory of each framework beside the kernel's, in fresh
    interpreters, the cases interleaved; medians, rounded so that a rerun moves them little."""
    import platform

    cases = {"python -c pass": "pass", **FRAMEWORK_IMPORTS}
    for code in cases.values():  # warm up: bytecode caches written, files in memory
        interpreter_time(python, code, write_bytecode=True)
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label in cases}
    for _ in range(runs):
        for label, code in cases.items():
            samples[label].append(peak_and_time(python, code))
    baseline = statistics.median(wall for wall, _ in samples["python -c pass"])
    results = [{"name": "python -c pass", "code": "pass", "import_ms": 0,
                "peak_mb": round(statistics.median(p for _, p in samples["python -c pass"])),
                "distributions": 0, "installed_mb": 0, "loaded": []}]
    for label, code in FRAMEWORK_IMPORTS.items():
        wall = statistics.median(w for w, _ in samples[label]) - baseline
        peak = statistics.median(p for _, p in samples[label])
        loaded = subprocess.run([python, "-c", code + LOADED_DISTRIBUTIONS], cwd=ROOT,
                                capture_output=True, text=True, check=True)
        names, size = json.loads(loaded.stdout.splitlines()[-1])
        results.append({"name": label, "code": code, "import_ms": round(wall * 100) * 10,
                        "peak_mb": round(peak), "distributions": len(names),
                        "installed_mb": round(size / 2**20), "loaded": names})
        print(f"{label:28} import {wall * 1000:7.0f} ms  peak {peak:5.0f} MB  "
              f"{len(names):3} distributions, {size / 2**20:5.0f} MB installed", flush=True)
    if json_path is not None:
        document = {"python": platform.python_version(), "runs": runs, "results": results}
        json_path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


def bare_loop(task: str, model: Any, tools: dict[str, Any], gate: Any,
              max_turns: int) -> list[dict[str, Any]]:
    """The seed's loop as one plain function: propose, validate, gate, execute, observe,
    with the seed's prompt estimate (the whole transcript, every turn) and its count of
    repeated denials; none of the kernel's checks (no copy for the model, no check of
    the reply, no copies across the effect boundary, no counts read from the record)."""
    from agentbook import SYSTEM_PROMPT, parse_tool_calls, validate_call

    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task}]
    token_log: list[int] = []
    denials: Counter[str] = Counter()
    for _ in range(max_turns):
        token_log.append(sum(len(json.dumps(message)) for message in messages) // 4)
        reply = {**model.chat(messages), "role": "assistant"}
        messages.append(reply)
        calls = parse_tool_calls(reply)
        if not calls:
            break
        for call in calls:
            if validate_call(call, tools) is not None:
                raise AssertionError("the benchmark's scenarios propose only valid calls")
            allowed, reason = gate(call)
            if allowed:
                body = {"ok": True, "kind": "result",
                        "content": tools[call.name].handler(**call.arguments)}
            else:
                fingerprint = f"{call.name}:{json.dumps(call.arguments, sort_keys=True)}"
                denials[fingerprint] += 1
                body = {"ok": False, "kind": "denied", "content": reason}
            messages.append({"role": "tool", "tool_call_id": call.call_id,
                             "content": json.dumps(body, default=str)})
            if not allowed and denials[fingerprint] >= 2:  # the seed's no-progress stop
                return messages
    return messages


@dataclass
class LoopCase:
    """One scripted run both loops make: its length in model calls and its model."""

    label: str
    turns: int
    model: Callable[[], Any]


def loop_cases() -> list[LoopCase]:
    """The over-reaching refund (4 turns: 3 gated calls, a denial, 1 refund) and the
    chapter's wanderer, which asks for the same lookup every turn, stopped at 32 and
    128 turns: the transcript grows by two messages a turn."""
    from agentbook import ScriptedModel, overreaching_model, tool_call_message

    def wanderer() -> Any:
        lookup = tool_call_message("call_w", "lookup_order", {"order_id": "A-17"})
        return ScriptedModel(turns=[lookup], reactions={"order_id": lookup})

    return [LoopCase("refund", 4, overreaching_model),
            LoopCase("lookups", 32, wanderer), LoopCase("lookups", 128, wanderer)]


def loops_of(case: LoopCase, task: str) -> tuple[Callable[[Any, Any], Any],
                                                 Callable[[Any, Any], Any]]:
    """run_agent and the bare loop on `case`, each taking a fresh model and desk."""
    from agentbook import Limits, refund_gate, run_agent

    limits = Limits(max_turns=case.turns, max_prompt_tokens=10**9)
    return (lambda model, tools: run_agent(task, model, tools, refund_gate, limits),
            lambda model, tools: bare_loop(task, model, tools, refund_gate, case.turns))


def time_runs(loop: Callable[[Any, Any], object], case: LoopCase, repeats: int) -> float:
    """Processor seconds per run of `loop`, its models and desks built before the clock."""
    from agentbook import make_environment

    inputs = [(case.model(), make_environment()[0]) for _ in range(repeats)]
    start = time.process_time()
    for model, tools in inputs:
        loop(model, tools)
    return (time.process_time() - start) / repeats


def bench_loop(runs: int) -> None:
    """run_agent against the seed's bare loop at 4, 32 and 128 turns. Each batch times
    one sample of each loop in turn (interleaved, so load falls on both alike), a sample
    being several runs; reports the medians, their ratio, and run_agent's cost per turn
    (flat if nothing in it grows with the transcript)."""
    from agentbook import make_environment

    task = "Order A-17 arrived damaged. Please refund it."
    print(f"{'turns':>5} {'scenario':>8} {'bare loop':>12} {'run_agent':>12} {'ratio':>6} "
          f"{'run_agent per turn':>19}   (processor time, medians of {runs} batches)",
          flush=True)
    for case in loop_cases():
        agent_loop, bare = loops_of(case, task)
        result = agent_loop(case.model(), make_environment()[0])
        messages = bare(case.model(), make_environment()[0])
        if (result.state.messages, result.state.turns) != (messages, case.turns):
            raise SystemExit(f"{case.turns} turns: the two loops made different transcripts")
        repeats = max(2, 800 // case.turns)
        samples = [(time_runs(agent_loop, case, repeats), time_runs(bare, case, repeats))
                   for _ in range(runs)]
        agent = statistics.median(sample[0] for sample in samples)
        plain = statistics.median(sample[1] for sample in samples)
        print(f"{case.turns:5} {case.label:>8} {plain * 1e6:9.0f} us {agent * 1e6:9.0f} us "
              f"{agent / plain:5.2f}x {agent / case.turns * 1e6:16.1f} us", flush=True)
    print("target: run_agent at most 1.3x the bare loop at every length, its cost per turn "
          "flat", flush=True)


def bench_mcp(runs: int, json_path: Path | None, calls: int = 200) -> None:
    """One lookup_order call through execute_call, on the local desk and on the desk served
    over stdio by `python -m agentbook.protocols serve`, `calls` calls a sample by the clock
    (the server is another process), alternating; and the server's start (connecting and
    listing its tools) and stop, once a sample. Medians of `runs` samples."""
    import importlib.metadata
    import platform

    from agentbook import ToolCall, execute_call, make_environment, mcp_tools, refund_gate

    call = ToolCall("b1", "lookup_order", {"order_id": "A-17"})
    command = [sys.executable, "-m", "agentbook.protocols", "serve"]

    def per_call(tools: dict[str, Any]) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            execute_call(call, tools, refund_gate)
        return (time.perf_counter() - start) / calls

    local, served, starts, stops = [], [], [], []
    for _ in range(runs):
        start = time.perf_counter()
        with mcp_tools(command) as tools:
            starts.append(time.perf_counter() - start)
            served.append(per_call(tools))
            local.append(per_call(make_environment()[0]))
            stop = time.perf_counter()
        stops.append(time.perf_counter() - stop)
    report("one call, in process", local, "us", 1e6)
    report("one call, over stdio", served, "us", 1e6)
    report("starting the server and listing its tools", starts)
    report("stopping it", stops)
    if json_path is not None:
        results = {
            "command": "python -m scripts.checks.bench mcp", "runs": runs, "calls": calls,
            "python": platform.python_version(), "mcp": importlib.metadata.version("mcp"),
            "cores": os.cpu_count(),
            # Rounded: the file is committed, and noise below these digits means nothing.
            "in_process_us": round(statistics.median(local) * 1e6, 1),
            "stdio_us": round(statistics.median(served) * 1e6),
            "start_s": round(statistics.median(starts), 2),
            "stop_s": round(statistics.median(stops), 2)}
        json_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {json_path}")


# --- The live book in the browser --------------------------------------------------------------

LIVE_PAGE = "chapters/01_anatomy.html"
FIRST_LIVE_CELL = "div[data-cell-id]:not([data-live='static'])"


def serve_counting(book: Path) -> tuple[Any, list[tuple[str, int]]]:
    """Serve `book` on a free local port, as `python3 -m http.server` does, counting bytes."""
    import functools
    import http.server
    import threading

    sent: list[tuple[str, int]] = []

    class Counting(http.server.SimpleHTTPRequestHandler):
        def copyfile(self, source: Any, outputfile: Any) -> None:
            data = source.read()
            sent.append((self.path, len(data)))
            outputfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Counting, directory=str(book)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, sent


def local_only(browser: Any, origin: str, context: Any = None) -> Any:
    """A fresh reader (an empty cache) whose pages may ask the local server only. Requests
    are watched, not routed: playwright turns the HTTP cache off in a routed context, and
    the cache is what a second visit is about."""
    context = context or browser.new_context(viewport={"width": 1280, "height": 900})
    elsewhere: list[str] = []
    context.on("request", lambda request: None if request.url.startswith(origin) or
                request.url.startswith(("data:", "blob:")) else elsewhere.append(request.url))
    context.elsewhere = elsewhere
    return context


def close_local(context: Any) -> None:
    """Close the reader's browser; a request to another host fails the benchmark."""
    elsewhere = context.elsewhere
    context.close()
    if elsewhere:
        raise SystemExit(f"the page asked another host: {elsewhere[:5]}")


def read_only_bytes(browser: Any, origin: str, sent: list[tuple[str, int]],
                    page_path: str) -> int:
    """Bytes a first visit downloads when the reader reads and runs nothing."""
    context = local_only(browser, origin)
    page = context.new_page()
    sent.clear()
    page.goto(origin + page_path, wait_until="networkidle")
    page.wait_for_selector(".live-toolbar")
    page.wait_for_timeout(500)  # anything a script starts late is counted too
    downloaded = sum(size for _, size in sent)
    close_local(context)
    return downloaded


def first_output(page: Any) -> float:
    """Seconds from a click on the first live cell's Run to its output."""
    cell = page.locator(FIRST_LIVE_CELL).first
    started = time.perf_counter()
    cell.get_by_role("button", name="Run").click()
    cell.locator("[data-live-output][data-status]").wait_for(timeout=120_000)
    return time.perf_counter() - started


def live_sample(playwright: Any, origin: str,
                sent: list[tuple[str, int]]) -> tuple[float, float, int, int]:
    """One reader's first visit (empty cache): the page loads, then the first Run; and the
    same reader's next visit, Python in the browser's cache. The reader has a profile on
    disk, as a real one does: an incognito context keeps its cache in memory, too small for
    Pyodide's 9.6 MB of WebAssembly."""
    with tempfile.TemporaryDirectory(prefix="agentbook-reader-") as profile:
        context = local_only(None, origin, playwright.chromium.launch_persistent_context(
            profile, executable_path=find_chromium(), args=CHROMIUM_FLAGS,
            viewport={"width": 1280, "height": 900}))
        return visit_twice(context, origin, sent)


def visit_twice(context: Any, origin: str,
                sent: list[tuple[str, int]]) -> tuple[float, float, int, int]:
    page = context.new_page()
    sent.clear()
    page.goto(origin + LIVE_PAGE, wait_until="networkidle")
    cold = first_output(page)
    page.wait_for_load_state("networkidle")
    downloaded = sum(size for _, size in sent)
    again = context.new_page()
    sent.clear()
    again.goto(origin + LIVE_PAGE, wait_until="networkidle")
    warm = first_output(again)
    again_bytes = sum(size for _, size in sent)
    close_local(context)
    return cold, warm, downloaded, again_bytes


def bench_live(book: Path, runs: int) -> None:
    if not (book / "live" / "worker.js").is_file():
        raise SystemExit(f"{book} has no live/ folder: render the book first (python3 dev.py "
                         "book, or quarto render)")
    chapters = sorted(path.relative_to(book).as_posix()
                      for path in (book / "chapters").glob("*.html"))
    from playwright.sync_api import sync_playwright

    server, sent = serve_counting(book)
    origin = f"http://127.0.0.1:{server.server_address[1]}/"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=find_chromium(),
                                             args=CHROMIUM_FLAGS)
        reading = {path: [read_only_bytes(browser, origin, sent, path) for _ in range(runs)]
                   for path in chapters}
        browser.close()
        samples = [live_sample(playwright, origin, sent) for _ in range(runs)]
    server.shutdown()
    for path, sizes in reading.items():
        report(f"read only, no cell run: {path}", sizes, "MB", 1e-6)
    largest = max(statistics.median(sizes) for sizes in reading.values())
    print(f"{'read only: the heaviest chapter page':44} {largest * 1e-6:7.2f} MB  (target 2 MB)",
          flush=True)
    report("first click to first output, cold page", [s[0] for s in samples])
    print(f"{'':44} (target 6 s)")
    report("first click to first output, Python cached", [s[1] for s in samples])
    print(f"{'':44} (target 3 s)")
    report("bytes of a first visit that runs a cell", [s[2] for s in samples], "MB", 1e-6)
    report("bytes of the next visit (cache warm)", [s[3] for s in samples], "MB", 1e-6)


LOOPING_FIXTURE = "wrong-q5a-never-returns"  # a function that never returns when tested


def bench_provenance(runs: int) -> None:
    """Provenance checks on hostile results, beside the backtracking pattern it replaced."""
    import random
    import re

    from agentbook import ProvenancePolicy

    value = "a" * 299 + "b"
    hostile = "a-" * 50_000 + value  # every word starts a long partial match

    def check(text: str, piece: str, found: bool) -> Callable[[], None]:
        def run() -> None:
            policy = ProvenancePolicy([""])
            policy.sightings.append((False, text))
            assert (policy.first_untrusted({"value": piece}) == piece) is found
        return run

    backtracking = re.compile(r"(?<![^\W_])" + r"[\W_]*".join(value) + r"(?![^\W_])")
    report("provenance check, 100 kB hostile text", [
        timed(check(hostile, value, True)) for _ in range(runs)])
    # One word of 100,000 letters holding a 10,000-letter value at its start, and 50,000
    # two-letter words where an odd-length value starts at every word and ends inside one.
    report("provenance check, 100 kB as one word", [
        timed(check("a" * 100_000, "a" * 10_000, False)) for _ in range(runs)])
    report("provenance check, 100 kB of short words", [
        timed(check("ab " * 33_333, "ab" * 1_000 + "a", True)) for _ in range(runs)])
    # A run that has read 100 results of 14 kB with accented letters, checking 10 values:
    # the first check reads every text, and the next ones find them read.
    rng = random.Random(1)
    words = ["Zürich", "café", "naïve", "Straße", "order", "refund", "ÀÉÎÕÜ"]
    texts = [" ".join(rng.choice(words) + str(rng.randrange(1000)) for _ in range(1500))
             for _ in range(100)]
    values = {f"k{index}": f"value{index}x" for index in range(10)}

    def long_run() -> None:
        policy = ProvenancePolicy([""])
        policy.sightings += [(False, text) for text in texts]
        assert policy.first_untrusted(values) is None

    report("provenance check after 100 results of 14 kB", [timed(long_run) for _ in range(runs)])
    policy = ProvenancePolicy([""])
    policy.sightings += [(False, text) for text in texts]
    policy.first_untrusted(values)
    report("the next check in the same run", [
        timed(lambda: policy.first_untrusted(values)) for _ in range(runs)])
    report("the same search as one regular expression",
           [timed(lambda: backtracking.search(hostile)) for _ in range(min(runs, 3))])


def bench_grading(count: int, workers: int, grades: Path | None, timeout: float,
                  test_timeout: float) -> None:
    """Grade a class of `count` submissions, the first chapter's fixtures copied in turn and
    5% of them the one whose function never returns, as `grading class` grades without Docker
    (a process pool); report submissions per minute and the slowest submission. The
    autograder's build is timed apart."""
    import nbformat

    from scripts.course import grading

    # The ones a student hands in by mistake: the hostile fixtures test the grader's limits.
    fixtures = sorted(path for path in (ROOT / grading.FIXTURES_DIR).glob("*.ipynb")
                      if path.stem != LOOPING_FIXTURE and not path.stem.startswith("hostile-"))
    if not fixtures:
        raise SystemExit(f"no fixture submissions in {grading.FIXTURES_DIR}/")
    looping = max(1, round(count * 0.05))
    chosen = [*itertools.islice(itertools.cycle(fixtures), count - looping),
              *[ROOT / grading.FIXTURES_DIR / f"{LOOPING_FIXTURE}.ipynb"] * looping]
    with tempfile.TemporaryDirectory(prefix="agentbook-bench-grading-") as scratch:
        folder = Path(scratch, "class")
        folder.mkdir()
        for number, fixture in enumerate(chosen, 1):
            shutil.copy(fixture, folder / f"student{number:03d}-{fixture.stem}.ipynb")
        kinds = Counter(path.stem.split("-", 1)[1] for path in folder.glob("*.ipynb"))
        print(f"class: {count} submissions, {looping} of them {LOOPING_FIXTURE}, "
              f"{len(kinds)} kinds; {workers} workers on {os.cpu_count()} cores; each cell "
              f"within {timeout:g} s, each test within {test_timeout:g} s")
        started = time.perf_counter()
        autograder = grading.build_autograder(ROOT, Path(scratch, "autograder"),
                                              "anatomy-exercises")
        print(f"otter assign (autograder zip): {time.perf_counter() - started:.1f} s")
        submissions = sorted(folder.glob("*.ipynb"))
        started = time.perf_counter()
        with grading.quiet_kernels():  # the kernels start as the class command starts them
            graded = grading.grade_in_pool(submissions, autograder, workers, timeout,
                                           test_timeout)
        elapsed = time.perf_counter() - started
        print(file=sys.stderr)
    if grades:
        source = nbformat.read(grading.choose_assignment(ROOT, "anatomy-exercises"), 4)
        grading.write_scores(grades, graded, {name: points for name, (points, manual)
                                              in grading.question_points(source).items()
                                              if not manual})
    print(f"graded {count} submissions in {elapsed:.1f} s: {count / elapsed * 60:.1f} "
          f"submissions per minute, {elapsed / count:.2f} s each")
    by_kind: dict[bool, list[float]] = {}
    for name, row in graded.items():
        by_kind.setdefault(LOOPING_FIXTURE in name, []).append(row.seconds)
    for loops, seconds in sorted(by_kind.items()):
        label = LOOPING_FIXTURE if loops else "the others"
        print(f"{label}: median {statistics.median(seconds):.1f} s, slowest {max(seconds):.1f} s")
    slowest = max(graded, key=lambda name: graded[name].seconds)
    print(f"slowest submission: {slowest}, {graded[slowest].seconds:.1f} s "
          f"({graded[slowest].status})")


# Grades the correct fixture once, in the checkout it runs in, and prints the seconds on the
# clock and of processor time (this process and the kernel); run by `correct` in each checkout.
GRADE_CORRECT = """
import resource, sys, time
from pathlib import Path
from scripts.course.grading import grade_one
import otter.api
def used():
    own, kids = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                     resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
archive = next(Path(sys.argv[1]).glob("anatomy-exercises/*.zip"))
start, cpu = time.perf_counter(), used()
graded = grade_one(Path("tests/fixtures/submissions/correct.ipynb"), archive)
points = sum(score.points for score in graded.scores.values())
print(time.perf_counter() - start, used() - cpu, points, graded.status)
"""


def bench_correct(against: Path | None, runs: int) -> None:
    """The correct submission graded by this checkout and by ``against``, alternating."""
    if against is None:
        raise SystemExit("correct needs --against DIR: another checkout of the book, set up")
    checkouts = {"this checkout": ROOT, f"{against}": against.resolve()}
    with tempfile.TemporaryDirectory(prefix="agentbook-bench-correct-") as scratch:
        zips = {}
        for label, checkout in checkouts.items():
            zips[label] = Path(scratch, str(len(zips)))
            subprocess.run([str(checkout / ".venv/bin/python"), "-m", "scripts.course.exercises",
                            "--autograder", str(zips[label])], cwd=checkout, check=True,
                           capture_output=True)
        samples: dict[str, list[tuple[float, float]]] = {label: [] for label in checkouts}
        for _ in range(runs):
            for label, checkout in checkouts.items():
                done = subprocess.run([str(checkout / ".venv/bin/python"), "-c", GRADE_CORRECT,
                                       str(zips[label])], cwd=checkout, check=True,
                                      capture_output=True, text=True)
                wall, cpu, points, status = done.stdout.split(maxsplit=3)
                if status.strip() != "ok":
                    raise SystemExit(f"{label}: the correct submission graded {points}: {status}")
                samples[label].append((float(wall), float(cpu)))
    for label, pairs in samples.items():
        report(f"{label}, on the clock", [pair[0] for pair in pairs])
        report(f"{label}, processor", [pair[1] for pair in pairs])
    ours, theirs = (samples[label] for label in checkouts)
    for index, kind in enumerate(("on the clock", "processor")):
        ratio = (statistics.median(pair[index] for pair in ours)
                 / statistics.median(pair[index] for pair in theirs))
        print(f"{'this checkout / the other, ' + kind:44} {ratio:7.3f}x  (target 1.10x)",
              flush=True)


# Every process a run of `hostile` starts carries this in its environment; what carries it
# afterwards, or sleeps as hostile-leaves-processes-behind's escapee does, was left behind.
HOSTILE_MARK = "AGENTBOOK_BENCH_HOSTILE"
ESCAPEE = b"sleep\x0086123\x00"


def left_behind(mark: str) -> list[str]:
    """The processes still running that a run marked with ``mark`` started."""
    from scripts.course.kernel_bound import processes

    found = []
    for pid, _ in processes():
        try:
            environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if f"{HOSTILE_MARK}={mark}".encode() in environment or command == ESCAPEE:
            words = command.replace(b"\0", b" ")[:60].decode(errors="replace")
            found.append(f"{pid} {words}")
    return found


def gradescope_run(archive: Path, submission: Path, folder: Path,
                   environment: dict[str, str]) -> tuple[float, float, str]:
    """One submission graded in Gradescope's layout by the zip's own run_otter.py: its score,
    the seconds it took, and the notes Gradescope shows (what happened, not scored, flagged)."""
    import zipfile

    for part in ("source", "submission", "results"):
        (folder / part).mkdir(parents=True)
    with zipfile.ZipFile(archive) as unpacked:
        unpacked.extractall(folder / "source")
    shutil.copy(submission, folder / "submission")
    started = time.perf_counter()
    subprocess.run([sys.executable, str(folder / "source" / "run_otter.py"), str(folder)],
                   cwd=folder, env=environment, capture_output=True, check=True)
    seconds = time.perf_counter() - started
    results = json.loads((folder / "results" / "results.json").read_text(encoding="utf-8"))
    score = results.get("score", sum(test.get("score", 0) for test in results["tests"]))
    notes = [f"{test['name']}: {test['output']}" if test["name"] != "Flagged for review"
             else "flagged" for test in results["tests"]
             if test["name"] in ("Autograder", "Not scored", "Flagged for review")]
    return float(score), seconds, "; ".join(notes)


def bench_hostile(timeout: float, test_timeout: float, workers: int) -> None:
    """Grade the correct submission, the one whose function never returns and every hostile
    one (exercises/source/hostile-answers.yml) as the class command grades them, then each in
    Gradescope's layout through the zip's own run_otter.py, both with these limits; report
    each one's points, seconds and status, and every process either path left running."""
    from uuid import uuid4

    from scripts.course import grading
    from scripts.course.exercises import ZipLimits, autograder_zip, build

    fixtures = ROOT / grading.FIXTURES_DIR
    chosen = [fixtures / "correct.ipynb", fixtures / f"{LOOPING_FIXTURE}.ipynb",
              *sorted(fixtures.glob("hostile-*.ipynb"))]
    mark = uuid4().hex
    environment = {**os.environ, HOSTILE_MARK: mark}
    with tempfile.TemporaryDirectory(prefix="agentbook-bench-hostile-") as scratch:
        folder = Path(scratch, "class")
        folder.mkdir()
        for path in chosen:
            shutil.copy(path, folder)
        build(ROOT, Path(scratch, "zips"), check_solutions=False,
              limits=ZipLimits(timeout, test_timeout))
        archive = autograder_zip(Path(scratch, "zips"), "anatomy-exercises")
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "scripts.course.grading", "class", str(folder),
                        "-o", str(Path(scratch, "out")), "--autograder", str(archive),
                        "--timeout", f"{timeout:g}", "--test-timeout", f"{test_timeout:g}",
                        "--workers", str(workers), "--engine", "process"],
                       cwd=ROOT, env=environment, capture_output=True)
        print(f"class command, {len(chosen)} submissions, {workers} at a time, each cell within "
              f"{timeout:g} s and each test within {test_timeout:g} s: "
              f"{time.perf_counter() - started:.1f} s; left running: "
              f"{left_behind(mark) or 'nothing'}")
        record = json.loads(Path(scratch, "out", "graded.json").read_text(encoding="utf-8"))
        for path in chosen:
            graded = record["submissions"][path.stem]["graded"]
            points = sum(score["points"] for score in graded["scores"].values())
            print(f"  {path.stem}: {points:.2f} in {graded['seconds']:.1f} s; "
                  f"{graded['status']}; review: {'; '.join(graded['review']) or 'none'}")
        print("Gradescope's layout, run_otter.py, one submission at a time:")
        for path in chosen:
            score, seconds, notes = gradescope_run(archive, path, Path(scratch, path.stem),
                                                   environment)
            print(f"  {path.stem}: {score:.2f} in {seconds:.1f} s; {notes or 'no notes'}; "
                  f"left running: {left_behind(mark) or 'nothing'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["chapter", "tests", "commands", "import", "loop", "live",
                                         "grading", "sandbox", "provenance", "correct",
                                         "hostile", "mcp", "frameworks"])
    parser.add_argument("--runs", type=int, help="samples to take the median of (default: "
                        "3 for commands, 5 for chapter and tests, 21 for import, loop "
                        "and sandbox)")
    parser.add_argument("--python", default="python3", help="interpreter for the README commands")
    parser.add_argument("--book", type=Path, default=ROOT / "_book",
                        help="for live: the rendered book to serve")
    parser.add_argument("--installer", choices=["uv", "pip"], default="uv",
                        help="for commands: set up with uv (as dev.py does) or pip alone")
    parser.add_argument("--json", type=Path, help="for mcp and frameworks: also write the "
                        "medians here, for Chapter 4 to read")
    parser.add_argument("--count", type=int, default=200, help="for grading: class size")
    parser.add_argument("--against", type=Path,
                        help="for correct: another checkout of the book, its .venv set up")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--csv", type=Path, help="for grading: also keep the grades here")
    parser.add_argument("--timeout", type=float, default=60,
                        help="for grading: each cell's limit, as `grading class --timeout`")
    parser.add_argument("--test-timeout", type=float, default=10,
                        help="for grading: each test's limit, as `grading class --test-timeout`")
    args = parser.parse_args(argv)
    default_runs = {"commands": 3, "import": 21, "sandbox": 21, "loop": 21,
                    "provenance": 21, "correct": 9, "frameworks": 7}.get(args.what, 5)
    runs = args.runs if args.runs is not None else default_runs
    if min(runs, args.count, args.workers) < 1:
        parser.error("--runs, --count and --workers must be at least 1")
    benches: dict[str, Callable[[], None]] = {
        "chapter": lambda: bench_chapters(runs),
        "tests": lambda: bench_tests(runs),
        "commands": lambda: bench_commands(args.python, runs, args.installer),
        "import": lambda: bench_import(sys.executable, runs),
        "loop": lambda: bench_loop(runs),
        "sandbox": lambda: bench_sandbox(runs),
        "frameworks": lambda: bench_frameworks(sys.executable, runs, args.json),
        "live": lambda: bench_live(args.book, runs),
        "grading": lambda: bench_grading(args.count, args.workers, args.csv, args.timeout,
                                         args.test_timeout),
        "provenance": lambda: bench_provenance(runs),
        "correct": lambda: bench_correct(args.against, runs),
        "hostile": lambda: bench_hostile(args.timeout, args.test_timeout, args.workers),
        "mcp": lambda: bench_mcp(runs, args.json),
    }
    benches[args.what]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
