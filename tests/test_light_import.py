"""`import agentbook` stays light: the heavy libraries load only when something needs them.

Each check runs in a fresh interpreter, because this test process has long since imported
everything; `sys.modules` there says exactly what an import pulled in.
"""

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("httpx", "matplotlib", "pandas", "numpy", "http.server", "ssl", "opentelemetry",
         "agentdojo")


def fresh(code: str) -> object:
    """Run ``code`` in a new interpreter and return the JSON it prints last."""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_import_agentbook_loads_none_of_the_heavy_libraries() -> None:
    code = ("import sys, json, agentbook; from agentbook import *; "
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    assert fresh(code) == []


def test_the_flat_namespace_still_offers_every_public_name() -> None:
    code = ("import json, agentbook; from agentbook import anatomy, durable, real_models, "
            "run_explorer; names = {}; exec('from agentbook import *', names); "
            "public = [*anatomy.__all__, *durable.__all__, *real_models.__all__, "
            "*run_explorer.__all__]; "
            "print(json.dumps([len(public), [n for n in public if n not in names "
            "or names[n] is not getattr(agentbook, n)]]))")
    count, missing = fresh(code)  # type: ignore[misc]
    assert missing == [] and count > 40


def test_httpx_loads_when_an_adapter_first_sends_a_request() -> None:
    code = (
        "import sys, json\n"
        "from agentbook import OpenAICompatibleModel, ReplayServer, overreaching_model\n"
        "model = OpenAICompatibleModel(base_url='http://127.0.0.1:9/v1', model='m')\n"
        "before = 'httpx' in sys.modules\n"
        "with ReplayServer(overreaching_model) as server:\n"
        "    model.base_url = server.base_url\n"
        "    reply = model.chat([{'role': 'user', 'content': 'hi'}])\n"
        "print(json.dumps([before, 'httpx' in sys.modules, reply['role']]))\n"
    )
    assert fresh(code) == [False, True, "assistant"]


def test_opentelemetry_loads_when_a_trace_is_first_asked_for() -> None:
    code = (
        "import sys, json\n"
        "from agentbook import (make_environment, overreaching_model, refund_gate,\n"
        "                       run_agent, run_spans, spans_to_otlp_json, trace_to_run)\n"
        "def loaded():\n"
        "    return any(m.startswith('opentelemetry') for m in sys.modules)\n"
        "tools, _ = make_environment()\n"
        "result = run_agent('Refund A-17.', overreaching_model(), tools, refund_gate)\n"
        "before = loaded()\n"
        "text = spans_to_otlp_json(run_spans(result))\n"
        "after = loaded()\n"
        "print(json.dumps([before, after, trace_to_run(text).stop]))\n"
    )
    assert fresh(code) == [False, True, "answered"]
