"""Hypothesis profiles for the property tests.

``ci`` (the default) is deterministic and keeps nothing between runs: no
example database, and Hypothesis's caches go to a temporary directory that
is removed at exit, so the suite tries the same inputs every time and leaves
no files behind. ``thorough`` tries many more random inputs and keeps its
example database in .hypothesis/ (git ignores it); pick it with
HYPOTHESIS_PROFILE=thorough.
"""

import os
import tempfile
from hypothesis import settings

settings.register_profile(
    "ci", max_examples=200, derandomize=True, deadline=None, print_blob=False, database=None
)
settings.register_profile("thorough", max_examples=5000, deadline=None)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)

if PROFILE == "ci":
    # Even without a database Hypothesis caches Unicode tables and constants on disk.
    _scratch = tempfile.TemporaryDirectory(prefix="agentbook-hypothesis-")
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", _scratch.name)
