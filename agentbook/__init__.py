"""agentbook: a complete AI agent in bare Python, saved from the book's chapters.

The modules beside this file are generated from the chapter notebooks'
``# @save`` cells and must not be edited by hand. This file is written by
hand: it gathers their public names into one flat namespace, in chapter
order, so that ``from agentbook import *`` gives a reader everything the
chapters define.
"""

from agentbook import anatomy
from agentbook.anatomy import *  # noqa: F403

__all__ = [*anatomy.__all__]
