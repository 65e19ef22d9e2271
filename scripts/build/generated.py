"""Compare the files a tool generates with those in the tree, and bring the tree up to date."""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable
from pathlib import Path


def read_files(root: Path, names: Iterable[str]) -> dict[str, str]:
    """The files among ``names`` (relative to ``root``) that exist, by name, in name order."""
    found = {}
    for name in sorted(set(names)):
        if (root / name).is_file():
            # newline="" keeps line endings as they are, so CRLF counts as a difference.
            with (root / name).open(encoding="utf-8", newline="") as file:
                found[name] = file.read()
    return found


def stale(committed: dict[str, str], wanted: dict[str, str]) -> list[str]:
    """The names whose committed text is not the wanted one, or that should not exist."""
    return [name for name in sorted(set(committed) | set(wanted))
            if committed.get(name) != wanted.get(name)]


def diff(committed: dict[str, str], wanted: dict[str, str]) -> str:
    """A unified diff from the committed files to the wanted ones; empty if equal."""
    chunks: list[str] = []
    for name in stale(committed, wanted):
        old, new = committed.get(name), wanted.get(name)
        chunks += difflib.unified_diff(
            (old or "").splitlines(keepends=True), (new or "").splitlines(keepends=True),
            fromfile=f"a/{name}" if old is not None else "/dev/null",
            tofile=f"b/{name}" if new is not None else "/dev/null")
    return "".join(line if line.endswith("\n") else line + "\n" for line in chunks)


def write(root: Path, wanted: dict[str, str], committed: dict[str, str]) -> list[str]:
    """Write the wanted files that changed, remove committed ones no longer wanted; return
    the names written or removed."""
    changed = stale(committed, wanted)
    for name in changed:
        path = root / name
        if name in wanted:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(wanted[name], encoding="utf-8", newline="")
        else:
            path.unlink()
    return changed


def sync(root: Path, wanted: dict[str, str], committed: dict[str, str], check: bool,
         what: str, command: str) -> int:
    """A generating command's last step: check (a diff and status 1 when the tree is stale)
    or write (naming each file written or removed); returns the exit status."""
    if check:
        report = diff(committed, wanted)
        if report:
            print(f"The {what} are stale; run `{command}` and commit the result.\n\n{report}",
                  file=sys.stderr)
            return 1
        print(f"the {what} are up to date")
        return 0
    changed = write(root, wanted, committed)
    for name in changed:
        print(f"wrote {name}" if name in wanted else f"removed {name}")
    if not changed:
        print(f"the {what} were already up to date")
    return 0
