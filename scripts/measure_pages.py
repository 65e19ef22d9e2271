"""Measure the rendered book as a reader's browser lays it out.

    python -m scripts.measure_pages [BOOK_DIR] [--width 1280] [--height 800]
                                    [--screenshots DIR]

Serves BOOK_DIR (default `_book`) on a loopback port, opens every HTML page in headless
Chromium at the given window size and reports, per page:

- every code block, output block or image wider than its column (it would need horizontal
  scrolling, or spill out), and how many monospace characters the column holds;
- every diagram's smallest text, in pixels as drawn on screen after the diagram is scaled
  to fit the column;
- every diagram label whose contrast against the shape behind it is below WCAG's 4.5:1.

It exits with status 1 when any page has a problem, 2 when Chromium is missing. Chromium is
driven through its DevTools protocol over a pipe (`--remote-debugging-pipe`), so nothing
beyond the standard library is needed.
"""

from __future__ import annotations

import argparse
import base64
import functools
import http.server
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MIN_DIAGRAM_TEXT_PX = 11.0
MIN_CONTRAST = 4.5  # WCAG AA for normal text
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--remote-debugging-pipe",
)  # and no --hide-scrollbars: a 1280 px window with a classic scrollbar has 15 px less room
PAGE_TIMEOUT = 60.0  # seconds for one page to load and its diagrams to draw

# Runs inside each page. Waits until every Mermaid block has become an SVG, then measures.
MEASURE_JS = (Path(__file__).with_name("measure_pages.js")).read_text(encoding="utf-8")


@dataclass
class PageReport:
    """What one page measured: problems found, and the numbers worth printing."""

    page: str
    columns_chars: list[int] = field(default_factory=list)
    too_wide: list[str] = field(default_factory=list)
    diagrams: list[dict[str, Any]] = field(default_factory=list)
    labels: list[dict[str, Any]] = field(default_factory=list)  # every diagram label
    loaded: bool = False
    viewport: int = 0
    column: list[float] = field(default_factory=list)

    def problems(self) -> list[str]:
        if not self.loaded:
            return [f"{self.page}: no <main> element: the page did not load as a book page"]
        found = [f"{self.page}: wider than its column: {what}" for what in self.too_wide]
        for diagram in self.diagrams:
            if diagram["smallest_px"] < MIN_DIAGRAM_TEXT_PX:
                found.append(f"{self.page}: diagram {diagram['id']} has text of "
                             f"{diagram['smallest_px']:.1f} px (\"{diagram['smallest_text']}\")")
        found += [f"{self.page}: low contrast: {label['diagram']}: \"{label['text']}\" at "
                  f"{label['contrast']:.1f}:1"
                  for label in self.labels if label["contrast"] < MIN_CONTRAST]
        return found


def find_chromium() -> str | None:
    """The Chromium binary: $CHROMIUM if set, else the first known name on PATH."""
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


class DevTools:
    """A minimal client of Chromium's DevTools protocol over --remote-debugging-pipe.

    Chromium reads commands on its file descriptor 3 and writes replies and events on 4;
    every message is JSON followed by a NUL byte.
    """

    def __init__(self, chromium: str, width: int, height: int) -> None:
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()
        self._profile = tempfile.mkdtemp(prefix="measure-pages-")
        command = [chromium, *CHROMIUM_FLAGS, f"--window-size={width},{height}",
                   f"--user-data-dir={self._profile}", "about:blank"]

        def wire_pipes() -> None:  # in the child: the pipes become descriptors 3 and 4
            os.dup2(to_browser_read, 3)
            os.dup2(from_browser_write, 4)

        self._process = subprocess.Popen(command, preexec_fn=wire_pipes, pass_fds=(3, 4),
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []

    def send(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its reply; raise if Chromium reports an error."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            if "method" in reply:
                self._events.append(reply)

    def wait_for(self, event: str, session: str) -> None:
        """Wait until a session reports an event (events seen earlier count too)."""
        while True:
            while self._events:
                seen = self._events.pop(0)
                if seen.get("method") == event and seen.get("sessionId") == session:
                    return
            self._events.append(self._receive())

    def _receive(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [], PAGE_TIMEOUT)
            if not ready:
                raise TimeoutError(f"Chromium sent nothing for {PAGE_TIMEOUT:.0f} s")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        parsed: dict[str, Any] = json.loads(message)
        return parsed

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, OSError):
            self._process.kill()
        self._process.wait(timeout=30)
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self._profile, ignore_errors=True)


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve a directory on a free loopback port, quietly, for as long as the block runs."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def measure_page(browser: DevTools, url: str, screenshot: Path | None) -> dict[str, Any]:
    """Open one page in a fresh tab, run the measuring script, optionally screenshot it."""
    target = browser.send("Target.createTarget", url="about:blank")["targetId"]
    session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    try:
        browser.send("Page.enable", session)
        browser.send("Page.navigate", session, url=url)
        browser.wait_for("Page.loadEventFired", session)
        evaluated = browser.send("Runtime.evaluate", session, expression=MEASURE_JS,
                                 awaitPromise=True, returnByValue=True,
                                 timeout=PAGE_TIMEOUT * 1000)
        if "exceptionDetails" in evaluated:
            raise RuntimeError(f"{url}: {evaluated['exceptionDetails']}")
        measured: dict[str, Any] = evaluated["result"]["value"]
        if screenshot is not None:
            shot = browser.send("Page.captureScreenshot", session, format="png",
                                captureBeyondViewport=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
        return measured
    finally:
        browser.send("Target.closeTarget", targetId=target)


def html_pages(book: Path) -> list[Path]:
    """Every page of the book, in a stable order (Quarto's site_libs hold none)."""
    return sorted(path for path in book.rglob("*.html")
                  if "site_libs" not in path.relative_to(book).parts)


def measure_book(book: Path, width: int = 1280, height: int = 800,
                 screenshots: Path | None = None) -> list[PageReport]:
    """Measure every page of a rendered book; needs Chromium (see find_chromium)."""
    chromium = find_chromium()
    if chromium is None:
        raise FileNotFoundError("Chromium not found (set $CHROMIUM or put it on PATH)")
    pages = html_pages(book)
    if not pages:
        raise FileNotFoundError(f"no HTML pages under {book}")
    reports = []
    browser = DevTools(chromium, width, height)
    try:
        with serve(book) as base:
            for page in pages:
                name = page.relative_to(book).as_posix()
                shot = None
                if screenshots is not None:
                    shot = screenshots / (name.replace("/", "_").removesuffix(".html") + ".png")
                measured = measure_page(browser, f"{base}/{name}", shot)
                reports.append(PageReport(page=name, **measured))
    finally:
        browser.close()
    return reports


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("book", nargs="?", default="_book", type=Path)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=800)
    parser.add_argument("--screenshots", type=Path, help="save a full-page PNG of each page")
    options = parser.parse_args(argv)
    if options.screenshots:
        options.screenshots.mkdir(parents=True, exist_ok=True)
    try:
        reports = measure_book(options.book, options.width, options.height,
                               options.screenshots)
    except FileNotFoundError as missing:
        print(missing, file=sys.stderr)
        return 2
    problems = []
    for report in reports:
        if not report.loaded:
            problems += report.problems()
            continue
        chars = min(report.columns_chars, default=0)
        print(f"{report.page}: viewport {report.viewport} px, text column "
              f"{report.column[1]:.0f} px; "
              f"{len(report.columns_chars)} code/output blocks, the narrowest holds "
              f"{chars} characters; {len(report.too_wide)} too wide")
        for diagram in report.diagrams:
            print(f"  diagram {diagram['id']}: scaled to {diagram['scale']:.0%}, "
                  f"smallest text {diagram['smallest_px']:.1f} px "
                  f"(\"{diagram['smallest_text']}\"), lowest contrast "
                  f"{diagram['lowest_contrast']:.1f}:1 at {diagram['box']}")
        problems += report.problems()
    for problem in problems:
        print("PROBLEM", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
