"""agentbook: a complete AI agent in bare Python, saved from the book's chapters.

The modules beside this file are generated from the chapter notebooks'
``# @save`` cells and must not be edited by hand. This file is written by
hand: it gathers their public names into one flat namespace, in chapter
order, so that ``from agentbook import *`` gives a reader everything the
chapters define.

Importing it stays light. Chapter 1's kernel (``agentbook.anatomy``) loads at
once; every later chapter's module loads when one of its names is first used
(PEP 562's module ``__getattr__``). Inside them, the model adapters load
httpx, the replay server the standard library's HTTP server, and the trace
functions OpenTelemetry, only when first used too.
"""

from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path
from typing import Any

from agentbook import anatomy
from agentbook.anatomy import *  # noqa: F403

# The later chapters' modules, in the book's order: a new chapter's module is one
# more name here (tests/test_light_import.py checks that none is left out).
LATER_MODULES = (
    "durable",
    "real_models",
    "run_explorer",
    "untrusted",
    "protocols",
)


def _module(name: str) -> Any:
    """A later chapter's module, imported on first use; its names join this one's."""
    module = importlib.import_module(f"agentbook.{name}")
    globals().update({public: getattr(module, public) for public in module.__all__})
    return module


def _public_names() -> list[str]:
    """Every chapter's public names, in chapter order: the package's ``__all__``."""
    return [*anatomy.__all__,
            *(public for name in LATER_MODULES for public in _module(name).__all__)]


# A generated module's `__all__ = [...]`, read without running the module.
DECLARED_ALL = re.compile(r"^__all__ = (\[.*?\])$", re.MULTILINE | re.DOTALL)


@cache
def _declared_names(name: str) -> frozenset[str]:
    """The public names a later module declares, read from its source, so that
    finding a name loads only the module that has it."""
    from ast import literal_eval  # here: only a lookup that needs it pays for it

    try:
        source = Path(__file__).with_name(f"{name}.py").read_text(encoding="utf-8")
    except OSError:  # installed where its source cannot be read (a zip): run it
        source = ""
    found = DECLARED_ALL.search(source)
    if found is None:  # not in the generated form: ask the module itself
        return frozenset(_module(name).__all__)
    return frozenset(literal_eval(found.group(1)))


def __getattr__(name: str) -> Any:
    """A later chapter's module or public name, loading its module on first use;
    a name no chapter defines is an AttributeError, as on any module."""
    if name == "__all__":
        public = _public_names()
        globals()["__all__"] = public
        return public
    if name in LATER_MODULES:
        return _module(name)
    for module_name in LATER_MODULES:
        if name in _declared_names(module_name):
            return getattr(_module(module_name), name)
    raise AttributeError(f"module 'agentbook' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *LATER_MODULES, *_public_names()})
