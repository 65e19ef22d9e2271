"""Run the replay server from the command line: ``python -m agentbook.serve [script.json]``.

This file only launches it. The server and ``serve_main`` are defined, and
explained, in the appendix chapters/a1_real_models.ipynb, which saves them
into agentbook/real_models.py; ``--help`` lists the options.
"""

import sys

from agentbook.real_models import serve_main

if __name__ == "__main__":
    sys.exit(serve_main())
