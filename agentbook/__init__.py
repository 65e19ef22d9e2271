"""agentbook: a complete AI agent in bare Python, saved from the book's chapters.

The modules beside this file are generated from the chapter notebooks'
``# @save`` cells and must not be edited by hand. This file is written by
hand: it gathers their public names into one flat namespace, in chapter
order, so that ``from agentbook import *`` gives a reader everything the
chapters define. Importing it stays light: the model adapters load httpx, the
replay server the standard library's HTTP server, and the trace functions
OpenTelemetry, only when first used.
"""

import json
from collections.abc import Callable
from typing import Any

from agentbook import anatomy, durable, real_models, run_explorer, untrusted
from agentbook.anatomy import *  # noqa: F403
from agentbook.durable import *  # noqa: F403
from agentbook.real_models import *  # noqa: F403
from agentbook.run_explorer import *  # noqa: F403
from agentbook.untrusted import *  # noqa: F403

# The chapter's example cells use json, Any and Callable straight after
# `from agentbook import *`, as they could in the notebook, so they come along.
__all__ = ["json", "Any", "Callable", *anatomy.__all__, *durable.__all__,
           *real_models.__all__, *run_explorer.__all__, *untrusted.__all__]
