"""Tests of agentbook.real_models: the two adapters, the replay server and every failure path.

Everything goes over real HTTP on 127.0.0.1; httpx is never mocked. Servers listen on port 0,
and retries sleep through a recorder instead of the clock, so the file runs in seconds.

The two official clients are imported by the tests that use them, not at the top: importing
them takes seconds, and every test worker collects this file while only one runs it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import select
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from agentbook.anatomy import (
    SYSTEM_PROMPT,
    Gate,
    Limits,
    RunResult,
    ScriptedModel,
    Stop,
    ToolSpec,
    allow_all,
    answer_message,
    check_run,
    estimate_tokens,
    make_environment,
    overreaching_model,
    parse_tool_calls,
    refund_gate,
    run_agent,
    tool_call_message,
    tool_schema_json,
)
from agentbook import real_models
from agentbook.real_models import (
    AnthropicModel,
    ApiKey,
    ModelError,
    OpenAICompatibleModel,
    ReplayServer,
    RETRY_COUNT_HEADER,
    THINKING_KEY,
    RetryPolicy,
    anthropic_tools,
    assistant_to_blocks,
    blocks_to_assistant,
    from_anthropic_messages,
    load_script,
    serve_main,
    to_anthropic_messages,
)

if TYPE_CHECKING:
    import anthropic
    import openai

REPO_ROOT = Path(__file__).resolve().parent.parent
TASK = "Order A-17 arrived damaged. Please make this right."
OPENING = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
API_KEY = "sk-agentbook-TEST-7f3a9c1e5d0b"  # distinctive, so any leak is unmistakable


# ---------------------------------------------------------------------------------------------
# The chapter's scenarios, each a script, a gate and limits, with the ending it must reach


def several_calls(content: str | None, *calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    """One assistant message proposing several calls, in the chapter's wire shape."""
    entries = [tool_call_message(call_id, name, arguments)["tool_calls"][0]
               for call_id, name, arguments in calls]
    return {"role": "assistant", "content": content, "tool_calls": entries}


def happy_path() -> ScriptedModel:
    return ScriptedModel(turns=[
        tool_call_message("call_1", "lookup_order", {"order_id": "A-17"}),
        tool_call_message("call_2", "refund_order", {"order_id": "A-17", "amount_cents": 4999}),
        answer_message("Order A-17 arrived damaged, so I refunded the 4999 cents you paid."),
    ])


def stubborn() -> ScriptedModel:
    insist = tool_call_message("call_s", "refund_order", {"order_id": "A-17", "amount_cents": 9999})
    return ScriptedModel(turns=[insist], reactions={"denied": insist})


def wanderer() -> ScriptedModel:
    lookup_again = tool_call_message("call_w", "lookup_order", {"order_id": "A-17"})
    return ScriptedModel(turns=[lookup_again], reactions={"order_id": lookup_again})


def liar() -> ScriptedModel:
    return ScriptedModel(turns=[answer_message("Good news - your refund is complete!")])


def react() -> ScriptedModel:
    return ScriptedModel(turns=[
        tool_call_message("t1", "lookup_order", {"order_id": "A-17"},
                          thought="Thought: see what A-17 actually is."),
        tool_call_message("t2", "refund_order", {"order_id": "A-17", "amount_cents": 4999},
                          thought="Thought: 4999 is within the limit."),
        answer_message("I refunded the full 4999 cents you paid."),
    ])


def busy_turn() -> ScriptedModel:
    """Four calls in one turn: a result, an error, a denial and an invalid proposal."""
    return ScriptedModel(turns=[
        several_calls("Checking everything at once.",
                      ("b1", "lookup_order", {"order_id": "A-17"}),
                      ("b2", "lookup_order", {"order_id": "Z-99"}),
                      ("b3", "refund_order", {"order_id": "A-17", "amount_cents": 9999}),
                      ("b4", "delete_database", {})),
        several_calls(None, ("b5", "refund_order", {"order_id": "A-17", "amount_cents": 4999}),
                      ("b6", "read_policy", {})),
        answer_message("Refunded 4999 cents."),
    ])


HOSTILE = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "h1", "type": "function", "function": {"name": "refund_order", "arguments": "5"}},
    {"type": "function", "function": {"name": "lookup_order", "arguments": '{"order_id": "A-17"}'}},
    {"id": "h3", "type": "function",
     "function": {"name": "refund_order", "arguments": ["A-17", 1]}},
    {"id": "h4", "type": "function", "function": {"name": 42, "arguments": "{}"}},
    {"id": "h5"},
    "refund everything",
]}


def hostile() -> ScriptedModel:
    return ScriptedModel(turns=[HOSTILE])


@dataclass(frozen=True)
class Scenario:
    new_model: Callable[[], ScriptedModel]
    gate: Gate
    ending: Stop
    limits: Limits = Limits()
    task: str = TASK


SCENARIOS = {
    "happy path": Scenario(happy_path, allow_all, Stop.ANSWERED),
    "over-reach without a gate": Scenario(overreaching_model, allow_all, Stop.ANSWERED),
    "over-reach behind the gate": Scenario(overreaching_model, refund_gate, Stop.ANSWERED),
    "stubborn": Scenario(stubborn, refund_gate, Stop.NO_PROGRESS),
    "wanderer": Scenario(wanderer, refund_gate, Stop.STEP_LIMIT, Limits(max_turns=5)),
    "token budget": Scenario(wanderer, refund_gate, Stop.TOKEN_LIMIT,
                             Limits(max_turns=40, max_prompt_tokens=1200)),
    "liar": Scenario(liar, refund_gate, Stop.ANSWERED),
    "react": Scenario(react, refund_gate, Stop.ANSWERED),
    "several calls in one turn": Scenario(busy_turn, refund_gate, Stop.ANSWERED),
    "hostile proposals": Scenario(hostile, refund_gate, Stop.ANSWERED),
}
# A tool call whose arguments are not an object has no tool_use form in the Messages API.
ANTHROPIC_SCENARIOS = [name for name in SCENARIOS if name != "hostile proposals"]

ModelFor = Callable[[dict[str, ToolSpec]], Any]


def run_facts(result: RunResult, effects: list[dict[str, Any]], limits: Limits) -> dict[str, Any]:
    """Everything two runs of one scenario must agree on, whoever carried the messages."""
    state = result.state
    return {"stop": result.stop, "answer": result.answer, "turns": state.turns,
            "messages": state.messages, "observations": state.observations,
            "prompt_token_log": state.prompt_token_log, "effects": effects,
            "check_run": check_run(result, effects, limits)}


def run(scenario: Scenario, model_for: ModelFor) -> dict[str, Any]:
    """Run a scenario on a fresh desk with the model that ``model_for`` makes for its tools."""
    tools, effects = make_environment()
    result = run_agent(scenario.task, model_for(tools), tools, scenario.gate, scenario.limits)
    return run_facts(result, effects, scenario.limits)


def in_process(scenario: Scenario) -> dict[str, Any]:
    facts = run(scenario, lambda tools: scenario.new_model())
    assert facts["stop"] == scenario.ending, "the scenario no longer shows what it is named for"
    return facts


def openai_model(base_url: str) -> ModelFor:
    return lambda tools: OpenAICompatibleModel(base_url=base_url, model="replay", tools=tools)


def anthropic_model(base_url: str) -> ModelFor:
    return lambda tools: AnthropicModel(base_url=base_url, model="replay", tools=tools)


def transcript(name: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = in_process(SCENARIOS[name])["messages"]
    return messages


# ---------------------------------------------------------------------------------------------
# The adapters against the replay server give the in-process run facts


@pytest.mark.parametrize("name", SCENARIOS)
def test_openai_adapter_over_http_gives_the_in_process_run_facts(name: str) -> None:
    scenario = SCENARIOS[name]
    with ReplayServer(scenario.new_model) as server:
        over_http = run(scenario, openai_model(server.base_url))
    assert over_http == in_process(scenario)
    assert len(server.received) == over_http["turns"]  # one request per model call


@pytest.mark.parametrize("name", ANTHROPIC_SCENARIOS)
def test_anthropic_adapter_over_http_gives_the_in_process_run_facts(name: str) -> None:
    scenario = SCENARIOS[name]
    with ReplayServer(scenario.new_model) as server:
        over_http = run(scenario, anthropic_model(server.base_url))
    assert over_http == in_process(scenario)
    assert all(set(body) >= {"system", "messages", "max_tokens"} for body in server.received)


def test_the_replay_server_starts_the_script_over_for_each_new_conversation() -> None:
    scenario = SCENARIOS["over-reach behind the gate"]
    with ReplayServer(overreaching_model) as server:
        first = run(scenario, openai_model(server.base_url))
        second = run(scenario, openai_model(server.base_url))
    assert first == second == in_process(scenario)


def test_the_replay_server_binds_to_loopback_on_a_port_the_system_picks() -> None:
    with ReplayServer(overreaching_model) as server:
        match = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/v1", server.base_url)
        assert match is not None and int(match.group(1)) > 0
        with socket.create_connection(("127.0.0.1", int(match.group(1))), timeout=2):
            pass
    with pytest.raises(ConnectionRefusedError):  # stopped means the port is released
        socket.create_connection(("127.0.0.1", int(match.group(1))), timeout=2).close()


def test_the_replay_server_answers_bad_requests_with_json_errors() -> None:
    with ReplayServer(overreaching_model) as server, httpx.Client(timeout=5) as client:
        base = server.base_url
        not_json = client.post(f"{base}/chat/completions", content=b"{nope")
        no_messages = client.post(f"{base}/chat/completions", json={"model": "replay"})
        wrong_path = client.post(f"{base}/completions", json={"prompt": "hi"})
        models = client.get(f"{base}/models")
    assert (not_json.status_code, not_json.json()) == (400, {"error": {"message": (
        "the request body is not JSON: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)")}})
    assert (no_messages.status_code, no_messages.json()) == (
        400, {"error": {"message": "malformed request (KeyError)"}})
    assert (wrong_path.status_code, wrong_path.json()) == (
        404, {"error": {"message": "no such endpoint: /v1/completions"}})
    assert [entry["id"] for entry in models.json()["data"]] == ["replay"]


def test_a_script_reply_the_messages_api_cannot_express_is_a_500() -> None:
    with ReplayServer(hostile) as server:
        model = AnthropicModel(base_url=server.base_url, model="replay",
                               retry=RetryPolicy(max_retries=0))
        with pytest.raises(ModelError) as caught:
            model.chat(OPENING)
    assert caught.value.status == 500
    assert caught.value.reason == ("tool call 'h1' has no tool_use form: "
                                   "arguments must be a JSON object, got int")


# ---------------------------------------------------------------------------------------------
# The official OpenAI client talks to the replay server


class OpenAIClientModel:
    """The loop's model interface on top of the official ``openai`` client."""

    def __init__(self, client: openai.OpenAI, tools: dict[str, ToolSpec]) -> None:
        self.client = client
        self.tools = tools

    def chat(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        completion = self.client.chat.completions.create(
            model="replay", messages=messages,  # type: ignore[arg-type]
            tools=tool_schema_json(self.tools))  # type: ignore[arg-type]
        message = completion.choices[0].message
        wire: dict[str, Any] = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            wire["tool_calls"] = [
                {"id": call.id, "type": call.type,
                 "function": {"name": call.function.name, "arguments": call.function.arguments}}
                for call in message.tool_calls]
        return wire


@contextlib.contextmanager
def openai_client(base_url: str) -> Iterator[openai.OpenAI]:
    import openai

    client = openai.OpenAI(base_url=base_url, api_key="not-needed", max_retries=0, timeout=5)
    try:
        yield client
    finally:
        client.close()


def test_the_openai_client_gets_a_valid_completion_with_tool_calls() -> None:
    tools, _ = make_environment()
    with ReplayServer(overreaching_model) as server, openai_client(server.base_url) as client:
        completion = client.chat.completions.create(
            model="replay", messages=OPENING,  # type: ignore[arg-type]
            tools=tool_schema_json(tools))  # type: ignore[arg-type]
    choice = completion.choices[0]
    assert (completion.object, choice.finish_reason, choice.message.role) == (
        "chat.completion", "tool_calls", "assistant")
    [call] = choice.message.tool_calls or []
    assert (call.id, call.type, call.function.name, json.loads(call.function.arguments)) == (
        "call_1", "function", "lookup_order", {"order_id": "A-17"})
    assert server.received[0]["tools"] == tool_schema_json(tools)


def test_the_openai_client_drives_the_loop_to_the_in_process_run_facts() -> None:
    scenario = SCENARIOS["over-reach behind the gate"]
    with ReplayServer(scenario.new_model) as server, openai_client(server.base_url) as client:
        facts = run(scenario, lambda tools: OpenAIClientModel(client, tools))
    assert facts == in_process(scenario)


# ---------------------------------------------------------------------------------------------
# Failure paths, against tiny canned servers

COMPLETION = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Done."},
                           "finish_reason": "stop"}]}
NAN_TEXT = "a NaN goes here"
ANTHROPIC_REPLY = {"type": "message", "role": "assistant",
                   "content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"}
Body = bytes | dict[str, Any] | list[Any] | None | Callable[[dict[str, str]], dict[str, Any]]


@contextlib.contextmanager
def loopback(handler: type[BaseHTTPRequestHandler],
             tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """Serve ``handler`` on a free loopback port for the block, over TLS if given a context;
    yield its /v1 address."""
    http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        http.socket = tls.wrap_socket(http.socket, server_side=True)
    thread = threading.Thread(target=http.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{http.server_port}/v1"
    finally:
        http.shutdown()
        http.server_close()
        thread.join()


@dataclass(frozen=True)
class Reply:
    """One canned reply. ``body`` may be a function of the request's headers."""

    status: int = 200
    body: Body = field(default_factory=lambda: COMPLETION)
    headers: dict[str, str] = field(default_factory=dict)
    stall: bool = False  # hold the reply back until the test is over
    reset: bool = False  # close the connection without a reply, as a crashed server does


@dataclass
class CannedServer:
    url: str
    requests: list[dict[str, Any]]


@contextlib.contextmanager
def canned(*replies: Reply, tls: ssl.SSLContext | None = None) -> Iterator[CannedServer]:
    """A loopback server answering each POST with the next reply; the last one repeats."""
    pending = list(replies)
    requests: list[dict[str, Any]] = []
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = dict(self.headers.items())
            requests.append({"path": self.path, "headers": headers, "body": json.loads(raw)})
            reply = pending.pop(0) if len(pending) > 1 else pending[0]
            if reply.stall:
                release.wait(10)
            if reply.reset:  # SO_LINGER of 0: close with a TCP reset, not a clean end
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.close_connection = True
                return
            body = reply.body(headers) if callable(reply.body) else reply.body
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            with contextlib.suppress(OSError):  # the client may have given up already
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    try:
        with loopback(Handler, tls) as url:
            yield CannedServer(url, requests)
    finally:
        release.set()


# Jitter drawn at the top of its range: each wait is the backoff's ceiling.
NO_JITTER = RetryPolicy(random=lambda: 1.0)


def recording_model(url: str, **settings: Any) -> tuple[OpenAICompatibleModel, list[float]]:
    """An adapter whose retry waits are recorded instead of slept."""
    waits: list[float] = []
    settings.setdefault("retry", NO_JITTER)
    return OpenAICompatibleModel(base_url=url, model="m", sleep=waits.append, **settings), waits


def failure(model: Any) -> ModelError:
    with pytest.raises(ModelError) as caught:
        model.chat(OPENING)
    return caught.value


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_a_500_then_success_is_retried_once_after_the_base_delay() -> None:
    with canned(Reply(500, {"error": {"message": "boom"}}), Reply()) as server:
        model, waits = recording_model(server.url)
        assert model.chat(OPENING) == {"role": "assistant", "content": "Done."}
    assert waits == [0.5]
    assert len(server.requests) == 2


def test_a_429_waits_as_long_as_retry_after_asks() -> None:
    with canned(Reply(429, {}, {"Retry-After": "2"}), Reply()) as server:
        model, waits = recording_model(server.url)
        assert model.chat(OPENING)["content"] == "Done."
    assert waits == [2.0]


def test_a_retry_after_beyond_the_ceiling_gives_up_at_once() -> None:
    with canned(Reply(429, {"error": {"message": "slow down"}}, {"Retry-After": "3600"}),
                Reply()) as server:
        model, waits = recording_model(server.url)
        error = failure(model)
    assert (error.status, error.reason) == (
        429, "slow down (not retried: the server asks for a wait over 60 s)")
    assert waits == [] and len(server.requests) == 1


def test_every_attempt_carries_its_number_as_the_sdk_sends_it() -> None:
    """The adapter and the official openai client, against the same failing server."""
    import openai

    replies = (Reply(503, {}, {"retry-after-ms": "1"}), Reply(503, {}, {"retry-after-ms": "1"}),
               Reply())
    with canned(*replies) as ours:
        recording_model(ours.url, retry=RetryPolicy(max_retries=2))[0].chat(OPENING)
    with canned(*replies) as theirs:
        client = openai.OpenAI(base_url=theirs.url, api_key="x", max_retries=2)
        client.chat.completions.create(model="m", messages=OPENING)  # type: ignore[arg-type]
    counts = [[request["headers"].get(RETRY_COUNT_HEADER) for request in server.requests]
              for server in (ours, theirs)]
    assert counts[0] == counts[1] == ["0", "1", "2"]


SDK_COMPLETION = {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                  "choices": [{"index": 0, "finish_reason": "length", "message": {
                      "role": "assistant", "content": NAN_TEXT}}]}


def test_the_sdks_return_what_the_adapters_refuse_as_the_appendix_says(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The table of differences: a reply cut short and a NaN are returned, and a proxy is
    used for 127.0.0.1, by both official clients; the adapters refuse all three."""
    import openai

    body = json.dumps(SDK_COMPLETION).replace(json.dumps(NAN_TEXT), "NaN").encode()
    anthropic_body = json.dumps({**ANTHROPIC_REPLY, "stop_reason": "max_tokens",
                                 "usage": {"input_tokens": 1, "output_tokens": 1},
                                 "id": "m", "model": "m"}).replace('"Done."', "NaN").encode()
    with canned(Reply(200, body)) as server:
        completion = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0) \
            .chat.completions.create(model="m", messages=OPENING)  # type: ignore[arg-type]
        assert completion.choices[0].finish_reason == "length"
        assert math.isnan(completion.choices[0].message.content)  # type: ignore[arg-type]
        assert failure(recording_model(server.url)[0]).reason.startswith(
            "the reply is not JSON (NaN is not standard JSON)")
    with canned(Reply(200, anthropic_body)) as server:
        message = anthropic_client(server.url).messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        assert message.stop_reason == "max_tokens"
        assert math.isnan(message.content[0].text)  # type: ignore[union-attr,arg-type]
    with canned(Reply()) as proxy, canned(Reply(200, SDK_COMPLETION)) as server:
        monkeypatch.setenv("HTTP_PROXY", proxy.url.removesuffix("/v1"))
        for name in ("NO_PROXY", "no_proxy", "http_proxy"):
            monkeypatch.delenv(name, raising=False)
        with contextlib.suppress(Exception):  # the proxy's canned reply is no completion
            openai.OpenAI(base_url=server.url, api_key="x", max_retries=0) \
                .chat.completions.create(model="m", messages=OPENING)  # type: ignore[arg-type]
        with contextlib.suppress(Exception):
            anthropic_client(server.url).messages.create(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert (len(proxy.requests), len(server.requests)) == (2, 0)


def test_a_server_that_keeps_failing_gets_a_bounded_number_of_retries() -> None:
    with canned(Reply(503, {"error": {"message": "overloaded"}})) as server:
        model, waits = recording_model(server.url)
        error = failure(model)
    assert (error.status, error.reason) == (503, "overloaded (gave up after 4 attempts)")
    assert waits == [0.5, 1.0, 2.0]
    assert len(server.requests) == 4


@pytest.mark.parametrize(("status", "body", "reason"), [
    (400, {"error": {"message": "unknown model: m"}}, "unknown model: m"),
    (401, {"error": "bad key"}, "bad key"),
    (404, b"<html>\n  Not Found\n</html>", "<html> Not Found </html>"),
    (422, b"", "Unprocessable Entity"),
])
def test_other_http_errors_raise_at_once_with_the_status_and_a_short_reason(
        status: int, body: Body, reason: str) -> None:
    with canned(Reply(status, body)) as server:
        model, waits = recording_model(server.url)
        error = failure(model)
    assert (error.status, error.reason, str(error)) == (status, reason, f"HTTP {status}: {reason}")
    assert waits == [] and len(server.requests) == 1


def test_a_long_error_body_is_cut_to_one_short_line() -> None:
    with canned(Reply(400, b"x" * 5000)) as server:
        error = failure(recording_model(server.url)[0])
    assert error.reason == "x" * 197 + "..."


def test_a_silent_server_times_out_instead_of_hanging() -> None:
    with canned(Reply(stall=True)) as server:
        model, waits = recording_model(server.url, timeout=0.2,
                                       retry=RetryPolicy(max_retries=1, random=lambda: 1.0))
        started = time.monotonic()
        error = failure(model)
        elapsed = time.monotonic() - started
    assert (error.status, error.reason) == (
        None, "no reply before the timeout (ReadTimeout) (gave up after 2 attempts)")
    assert elapsed < 2 and waits == [0.5] and len(server.requests) == 2


def test_a_refused_connection_raises_model_error() -> None:
    model, waits = recording_model(closed_port_url())
    error = failure(model)
    assert (error.status, str(error)) == (
        None, "could not connect to the model server (ConnectError) (gave up after 4 attempts)")
    assert waits == [0.5, 1.0, 2.0]  # a refused connection is retried, as the SDKs do


def test_a_url_without_a_scheme_raises_model_error() -> None:
    error = failure(OpenAICompatibleModel(base_url="localhost:8000/v1", model="m"))
    assert (error.status, error.reason) == (None, "the request failed (UnsupportedProtocol)")


def test_a_body_that_is_not_json_raises_model_error() -> None:
    with canned(Reply(200, b"<html>surprise</html>")) as server:
        error = failure(recording_model(server.url)[0])
    assert (error.status, error.reason) == (
        200, "the reply is not JSON (Expecting value: line 1 column 1 (char 0))")


@pytest.mark.parametrize("body", [
    {}, {"choices": []}, {"choices": [{}]}, {"choices": [{"message": "hi"}]},
    {"choices": "all of them"}, [], None,
])
def test_json_without_choices_or_message_raises_model_error(body: Body) -> None:
    with canned(Reply(200, body)) as server:
        error = failure(recording_model(server.url)[0])
    assert (error.status, error.reason) == (200, "the reply has no choices[0].message")


def test_a_reply_is_cut_down_to_the_books_wire_shape() -> None:
    message = {"role": "assistant", "content": "Hi.", "refusal": None, "tool_calls": [],
               "reasoning_content": "hmm"}
    with canned(Reply(200, {"choices": [{"message": message}]})) as server:
        assert recording_model(server.url)[0].chat(OPENING) == {
            "role": "assistant", "content": "Hi."}


def test_the_anthropic_adapter_shares_the_retries_and_checks_its_reply() -> None:
    with canned(Reply(529, {"type": "error", "error": {"message": "Overloaded"}}),
                Reply(200, ANTHROPIC_REPLY), Reply(200, {"type": "message"})) as server:
        waits: list[float] = []
        model = AnthropicModel(base_url=server.url, model="m", sleep=waits.append,
                               retry=NO_JITTER)
        assert model.chat(OPENING) == {"role": "assistant", "content": "Done."}
        error = failure(model)
    assert waits == [0.5]
    assert (error.status, error.reason) == (200, "the reply has no list of content blocks")
    assert [request["path"] for request in server.requests] == ["/v1/messages"] * 3
    assert server.requests[0]["headers"]["anthropic-version"] == "2023-06-01"


# ---------------------------------------------------------------------------------------------
# The API key


def echo_credentials(headers: dict[str, str]) -> dict[str, Any]:
    """A careless server that quotes the credentials it was sent in its error message."""
    sent = {name: value for name, value in headers.items()
            if name.lower() in ("authorization", "x-api-key")}
    return {"error": {"message": f"rejected credentials {sent}"}}


def key_failures(model_for: Callable[[str], Any], ok: dict[str, Any]) -> list[ModelError]:
    """Drive an adapter through every failure path, with the key in the environment."""
    failures = []
    for replies in ([Reply(401, echo_credentials)], [Reply(503, echo_credentials)],
                    [Reply(200, b"not json")], [Reply(200, {"nothing": "here"})],
                    [Reply(stall=True)]):
        with canned(*replies) as server:
            failures.append(failure(model_for(server.url)))
    with canned(Reply(500, echo_credentials), Reply(429, {}, {"Retry-After": "1"}),
                Reply(200, ok)) as server:
        model_for(server.url).chat(OPENING)
        assert len(server.requests) == 3
    failures.append(failure(model_for(closed_port_url())))
    return failures


def test_the_api_key_never_appears_in_reprs_errors_output_or_logs(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    caplog.set_level(logging.DEBUG)
    for name in ("httpx", "httpcore"):
        caplog.set_level(logging.DEBUG, logger=name)
    settings = {"model": "m", "sleep": lambda seconds: None, "timeout": 0.1,
                "retry": RetryPolicy(max_retries=2)}
    adapters: list[tuple[Callable[[str], Any], dict[str, Any]]] = [
        (lambda url: OpenAICompatibleModel(base_url=url, **settings), COMPLETION),
        (lambda url: AnthropicModel(base_url=url, **settings), ANTHROPIC_REPLY),
    ]
    texts: list[str] = []
    with canned(Reply(401, echo_credentials)) as server:
        error = failure(adapters[0][0](server.url))
        assert server.requests[0]["headers"]["Authorization"] == f"Bearer {API_KEY}"  # sent
        assert "[redacted]" in error.reason  # and quoted back by the careless server
    with ReplayServer(overreaching_model) as replay:
        for model_for, ok in adapters:
            model = model_for(replay.base_url)
            texts += [repr(model), str(model), repr(model.chat(OPENING))]
            for error in key_failures(model_for, ok):
                assert error.__cause__ is None
                texts += [str(error), repr(error), repr(error.args),
                          "".join(traceback.format_exception(error))]
    captured = capsys.readouterr()
    texts += [captured.out, captured.err, caplog.text]
    texts += [f"{record.getMessage()} {record.args!r}" for record in caplog.records]
    assert {"httpx", "httpcore.connection", "httpcore.http11"} <= {
        record.name for record in caplog.records}  # the libraries' own logs were captured
    assert [text for text in texts if API_KEY in text] == []


def test_without_a_key_in_the_environment_no_credentials_are_sent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with canned(Reply(200, COMPLETION), Reply(200, ANTHROPIC_REPLY)) as server:
        OpenAICompatibleModel(base_url=server.url, model="m").chat(OPENING)
        AnthropicModel(base_url=server.url, model="m").chat(OPENING)
    sent = [{name.lower() for name in request["headers"]} for request in server.requests]
    assert all(not names & {"authorization", "x-api-key"} for names in sent)


@pytest.mark.parametrize("flaw", ["\x1b", "\u00f8", "\n"])
def test_a_key_no_header_can_carry_is_refused_without_being_shown(
        flaw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", f"sk-{flaw}{API_KEY}")
    error = failure(OpenAICompatibleModel(base_url=closed_port_url(), model="m"))
    assert error.reason == "$OPENAI_API_KEY holds characters an HTTP header cannot carry"


# ---------------------------------------------------------------------------------------------
# The Anthropic translation


@pytest.mark.parametrize("name", ANTHROPIC_SCENARIOS)
def test_the_anthropic_translation_round_trips_every_transcript_the_loop_writes(name: str) -> None:
    messages = transcript(name)
    system, turns = to_anthropic_messages(messages)
    assert json.loads(json.dumps(turns)) == turns  # plain JSON, as it must be on the wire
    assert from_anthropic_messages(system, turns) == messages
    for message in messages:
        if message["role"] == "assistant":
            assert blocks_to_assistant(assistant_to_blocks(message)) == message


def test_the_system_prompt_moves_to_the_top_level_field_and_turns_alternate() -> None:
    system, turns = to_anthropic_messages(transcript("over-reach behind the gate"))
    assert system == SYSTEM_PROMPT
    roles = [turn["role"] for turn in turns]
    assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"] * (len(roles) % 2)


def test_several_calls_become_tool_use_blocks_and_their_results_share_the_next_user_turn() -> None:
    messages = transcript("several calls in one turn")
    _, turns = to_anthropic_messages(messages)
    busy, results = turns[1], turns[2]
    assert busy == {"role": "assistant", "content": [
        {"type": "text", "text": "Checking everything at once."},
        {"type": "tool_use", "id": "b1", "name": "lookup_order", "input": {"order_id": "A-17"}},
        {"type": "tool_use", "id": "b2", "name": "lookup_order", "input": {"order_id": "Z-99"}},
        {"type": "tool_use", "id": "b3", "name": "refund_order",
         "input": {"order_id": "A-17", "amount_cents": 9999}},
        {"type": "tool_use", "id": "b4", "name": "delete_database", "input": {}},
    ]}
    assert results["role"] == "user"
    assert [(block["type"], block["tool_use_id"], json.loads(block["content"])["kind"],
             block["is_error"]) for block in results["content"]] == [
        ("tool_result", "b1", "result", False),
        ("tool_result", "b2", "error", True),
        ("tool_result", "b3", "denied", True),
        ("tool_result", "b4", "invalid", True),
    ]
    assert [block["content"] for block in results["content"]] == [
        message["content"] for message in messages[3:7]]  # the loop's text, unchanged


def test_is_error_is_set_exactly_for_invalid_denied_and_error_observations() -> None:
    for name in ANTHROPIC_SCENARIOS:
        _, turns = to_anthropic_messages(transcript(name))
        for turn in turns:
            for block in turn["content"] if isinstance(turn["content"], list) else []:
                if block["type"] == "tool_result":
                    kind = json.loads(block["content"])["kind"]
                    assert block["is_error"] == (kind in ("invalid", "denied", "error"))


def test_a_tool_call_without_an_argument_object_has_no_anthropic_form() -> None:
    with pytest.raises(ModelError, match="tool call 'h1' has no tool_use form"):
        to_anthropic_messages([*OPENING, HOSTILE])


def test_reply_blocks_become_tool_calls_with_arguments_as_a_json_string() -> None:
    message = blocks_to_assistant([
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup_order",
         "input": {"order_id": "A-17"}},
        {"type": "tool_use", "id": "toolu_2", "name": "read_policy", "input": {}},
        {"type": "thinking", "thinking": "not for the content", "signature": "s"},
    ])
    assert message == {"role": "assistant", "content": "Let me check.", THINKING_KEY: [
        {"type": "thinking", "thinking": "not for the content", "signature": "s"}],
        "tool_calls": [
        {"id": "toolu_1", "type": "function",
         "function": {"name": "lookup_order", "arguments": '{"order_id": "A-17"}'}},
        {"id": "toolu_2", "type": "function",
         "function": {"name": "read_policy", "arguments": "{}"}},
    ]}
    assert [call.arguments for call in parse_tool_calls(message)] == [{"order_id": "A-17"}, {}]


def test_a_malformed_tool_use_block_is_left_for_the_loops_parser_to_refuse() -> None:
    message = blocks_to_assistant([{"type": "tool_use", "name": "refund_order", "input": 5}])
    [call] = parse_tool_calls(message)
    assert (call.call_id, call.arguments, call.problem) == (
        "missing-id-0", None, "a tool call needs a string id")


def test_anthropic_tool_declarations_carry_the_same_schema_as_input_schema() -> None:
    tools, _ = make_environment()
    declared = tool_schema_json(tools)
    assert anthropic_tools(tools) == [
        {"name": d["function"]["name"], "description": d["function"]["description"],
         "input_schema": d["function"]["parameters"]} for d in declared]


# ---------------------------------------------------------------------------------------------
# The command line and the package


def test_python_m_agentbook_serve_prints_its_url_and_replays_the_over_reaching_model() -> None:
    command = [sys.executable, "-m", "agentbook.serve", "--port", "0"]
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([process.stdout], [], [], 10)
        assert ready, "the server printed nothing within 10 seconds"
        line = process.stdout.readline() if process.stdout else ""
        match = re.search(r"http://127\.0\.0\.1:\d+/v1", line)
        assert line.startswith("replaying the over-reaching model at ") and match, line
        scenario = SCENARIOS["over-reach behind the gate"]
        assert run(scenario, openai_model(match.group(0))) == in_process(scenario)
    finally:
        # SIGTERM, not SIGINT: a shell that runs this suite in the background starts it
        # with SIGINT ignored, and an ignored signal stays ignored in every child.
        process.terminate()
        _, errors = process.communicate(timeout=10)
    assert (process.returncode, errors) == (0, "")


def test_a_script_file_holds_a_list_of_turns_or_turns_with_reactions(tmp_path: Path) -> None:
    as_list = tmp_path / "list.json"
    as_list.write_text(json.dumps([answer_message("Hello.")]))
    as_object = tmp_path / "object.json"
    script = overreaching_model()
    as_object.write_text(json.dumps({"turns": script.turns, "reactions": script.reactions}))
    assert load_script(as_list)().chat(OPENING) == answer_message("Hello.")
    scenario = SCENARIOS["over-reach behind the gate"]
    with ReplayServer(load_script(as_object)) as server:
        assert run(scenario, openai_model(server.base_url)) == in_process(scenario)


def test_the_command_line_reports_a_script_it_cannot_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.json").write_text('{"reactions": {}}')
    assert serve_main([str(tmp_path / "missing.json")]) == 2
    assert serve_main([str(tmp_path / "bad.json")]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert errors[0].startswith("error: [Errno 2] No such file or directory")
    assert errors[1] == "error: 'turns'"


def test_importing_the_package_starts_nothing_and_prints_nothing() -> None:
    code = ("import threading, agentbook, agentbook.serve; "
            "print(threading.active_count(), 'ReplayServer' in agentbook.__all__)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=30, check=True)
    assert (done.stdout, done.stderr) == ("1 True\n", "")


# ---------------------------------------------------------------------------------------------
# Streaming: refused in each API's own error shape, so both official clients raise


def anthropic_client(base_url: str) -> anthropic.Anthropic:
    """The official Anthropic client; it adds /v1/messages to the server's root itself."""
    import anthropic

    return anthropic.Anthropic(base_url=base_url.removesuffix("/v1"), api_key="not-needed",
                               max_retries=0, timeout=5)


NO_STREAM = 'this server does not stream; send the request without "stream": true'


def test_the_openai_client_asking_for_a_stream_gets_a_clear_error() -> None:
    import openai

    with ReplayServer(overreaching_model) as server, openai_client(server.base_url) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            for _ in client.chat.completions.create(
                    model="replay", messages=OPENING, stream=True):  # type: ignore[arg-type]
                pass
    assert caught.value.status_code == 400
    assert NO_STREAM in str(caught.value)
    assert server.received[0]["stream"] is True


def test_the_anthropic_client_asking_for_a_stream_gets_a_clear_error() -> None:
    import anthropic

    system, turns = to_anthropic_messages(OPENING)
    with ReplayServer(overreaching_model) as server:
        client = anthropic_client(server.base_url)
        with pytest.raises(anthropic.BadRequestError) as streamed:
            with client.messages.stream(model="replay", max_tokens=100, system=system or "",
                                        messages=turns) as stream:  # type: ignore[arg-type]
                stream.get_final_message()
        with pytest.raises(anthropic.BadRequestError) as created:
            client.messages.create(model="replay", max_tokens=100, messages=turns,  # type: ignore[arg-type]
                                   stream=True)
        client.close()
    for caught in (streamed, created):
        assert caught.value.status_code == 400
        assert caught.value.body == {"type": "error", "error": {
            "type": "invalid_request_error", "message": NO_STREAM}}


def test_errors_on_the_messages_path_have_the_messages_api_shape() -> None:
    with ReplayServer(overreaching_model) as server, httpx.Client(timeout=5) as client:
        not_json = client.post(f"{server.base_url}/messages", content=b"{nope")
    assert (not_json.status_code, not_json.json()) == (400, {"type": "error", "error": {
        "type": "invalid_request_error", "message": "the request body is not JSON: Expecting "
        "property name enclosed in double quotes: line 1 column 2 (char 1)"}})


# ---------------------------------------------------------------------------------------------
# A deadline for the whole call


@contextlib.contextmanager
def trickling(interval: float = 0.25, part: str = "body", then_silence: bool = False,
              tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """A server that sends one byte every ``interval``: of its headers, or, after headers
    sent at once, of its body. With ``then_silence`` it sends a single byte and no more."""
    stop = threading.Event()
    headers = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nX-Padding: " + b"x" * 1000

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with contextlib.suppress(OSError):
                if part == "body":
                    self.wfile.write(headers.split(b"\r\nX-Padding")[0] + b"\r\n\r\n")
                    self.wfile.flush()
                data = iter(headers if part == "headers" else b" " * 1000)
                while not stop.wait(interval):
                    self.wfile.write(bytes([next(data)]))
                    self.wfile.flush()
                    if then_silence:
                        stop.wait()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    try:
        with loopback(Handler, tls) as url:
            yield url
    finally:
        stop.set()


ADAPTERS: dict[str, Callable[..., Any]] = {
    "openai": lambda url, **settings: OpenAICompatibleModel(base_url=url, model="m", **settings),
    "anthropic": lambda url, **settings: AnthropicModel(base_url=url, model="m", **settings),
}


@pytest.mark.parametrize("part", ["body", "headers"])
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_trickling_server_cannot_hold_a_call_past_its_deadline(adapter: str, part: str) -> None:
    # Every read gets its byte well within the timeout; only the deadline can end the call.
    with trickling(interval=0.05, part=part) as url:
        model = ADAPTERS[adapter](url, timeout=0.4, deadline=0.4)
        started = time.monotonic()
        error = failure(model)
        elapsed = time.monotonic() - started
    assert (error.status, error.reason) == (None, "no complete reply within the deadline of 0.4 s")
    assert 0.35 < elapsed < 1.4


def test_a_byte_just_before_the_deadline_buys_no_extra_wait() -> None:
    # The byte comes at 0.5 s; without the watchdog the next wait, of up to 0.7 s (the
    # timeout, cut to the deadline at the start), would run to about 1.2 s.
    with trickling(interval=0.5, then_silence=True) as url:
        model = ADAPTERS["openai"](url, timeout=0.8, deadline=0.7)
        started = time.monotonic()
        error = failure(model)
        elapsed = time.monotonic() - started
    assert error.reason == "no complete reply within the deadline of 0.7 s"
    assert elapsed < 1.1


# A self-signed certificate for 127.0.0.1, made once with openssl and valid until 2126. It
# protects nothing: it lets a loopback server speak TLS to an adapter that trusts it.
TLS_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "tls"


@pytest.fixture
def tls_server(monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    """A TLS context for a loopback server, whose certificate the adapters then trust."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(TLS_FIXTURES / "cert.pem", TLS_FIXTURES / "key.pem")
    client = ssl.create_default_context(cafile=TLS_FIXTURES / "cert.pem")
    monkeypatch.setattr(real_models, "_tls_context", lambda: client)
    return server


def test_the_deadline_holds_over_https(tls_server: ssl.SSLContext) -> None:
    # TLS wraps the socket httpx connected, so the watchdog must reach it through TLS too.
    with trickling(interval=0.05, part="headers", tls=tls_server) as url:
        model = ADAPTERS["openai"](url, timeout=0.4, deadline=0.4)
        started = time.monotonic()
        error = failure(model)
        elapsed = time.monotonic() - started
    assert error.reason == "no complete reply within the deadline of 0.4 s"
    assert elapsed < 1.4


def test_a_reply_over_https_still_arrives(tls_server: ssl.SSLContext) -> None:
    with canned(Reply(), tls=tls_server) as server:
        reply = ADAPTERS["openai"](server.url, timeout=5.0, deadline=5.0).chat(OPENING)
    assert reply["content"] == "Done."


def test_the_deadline_cuts_a_silent_wait_shorter_than_the_timeout() -> None:
    with canned(Reply(stall=True)) as server:
        model, _ = recording_model(server.url, timeout=60.0, deadline=0.3)
        started = time.monotonic()
        error = failure(model)
        elapsed = time.monotonic() - started
    assert error.reason == "no complete reply within the deadline of 0.3 s"
    assert elapsed < 1.3


def test_a_retry_whose_wait_would_pass_the_deadline_is_not_attempted() -> None:
    with canned(Reply(503, {"error": {"message": "overloaded"}}, {"Retry-After": "5"})) as server:
        model, waits = recording_model(server.url, deadline=2.0)
        error = failure(model)
    assert (error.status, error.reason) == (
        503, "overloaded (gave up: waiting 5 s would pass the deadline)")
    assert waits == [] and len(server.requests) == 1


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize(("timeout", "deadline"), [(0, 1.0), (1.0, 0), (-1.0, 1.0),
                                                   (1.0, float("nan"))])
def test_time_limits_that_let_nothing_through_are_refused(
        adapter: str, timeout: float, deadline: float) -> None:
    with pytest.raises(ValueError, match="timeout and deadline must be positive"):
        ADAPTERS[adapter]("http://127.0.0.1:9/v1", timeout=timeout, deadline=deadline)


# ---------------------------------------------------------------------------------------------
# Usage: reported by the replay server, read by both official clients, kept by the adapters


def test_the_openai_client_reads_usage_from_the_replay_server() -> None:
    with ReplayServer(overreaching_model) as server, openai_client(server.base_url) as client:
        completion = client.chat.completions.create(
            model="replay", messages=OPENING)  # type: ignore[arg-type]
    reply = overreaching_model().chat(OPENING)
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens,
            completion.usage.total_tokens) == (
        estimate_tokens(OPENING), estimate_tokens([reply]),
        estimate_tokens(OPENING) + estimate_tokens([reply]))


def test_the_anthropic_client_reads_usage_from_the_replay_server() -> None:
    system, turns = to_anthropic_messages(OPENING)
    with ReplayServer(overreaching_model) as server:
        client = anthropic_client(server.base_url)
        message = client.messages.create(model="replay", max_tokens=100, system=system or "",
                                         messages=turns)  # type: ignore[arg-type]
        client.close()
    reply = overreaching_model().chat(OPENING)
    assert (message.usage.input_tokens, message.usage.output_tokens) == (
        estimate_tokens(OPENING), estimate_tokens([reply]))
    assert message.stop_reason == "tool_use"


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_the_adapters_log_the_usage_of_every_reply(adapter: str) -> None:
    scenario = SCENARIOS["over-reach behind the gate"]
    tools, _ = make_environment()
    with ReplayServer(scenario.new_model) as server:
        model = ADAPTERS[adapter](server.base_url, tools=tools)
        result = run_agent(TASK, model, tools, scenario.gate)
    field = "prompt_tokens" if adapter == "openai" else "input_tokens"
    assert [usage[field] for usage in model.usage_log] == result.state.prompt_token_log
    assert "usage_log" not in repr(model)


def test_usage_is_logged_as_the_server_reported_it_or_as_none() -> None:
    reported = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
                "prompt_tokens_details": {"cached_tokens": 0}}
    with canned(Reply(200, {**COMPLETION, "usage": reported}), Reply(200, COMPLETION)) as server:
        model, _ = recording_model(server.url)
        model.chat(OPENING)
        model.chat(OPENING)
    assert model.usage_log == [reported, None]


# ---------------------------------------------------------------------------------------------
# Only documented fields go back to the server


OPENAI_FIELDS = {"system": {"role", "content"}, "user": {"role", "content"},
                 "assistant": {"role", "content", "tool_calls"},
                 "tool": {"role", "content", "tool_call_id"}}


def undocumented_openai_fields(request: dict[str, Any]) -> list[str]:
    """Every field of a chat-completions request's messages that the API does not document."""
    found = []
    for message in request.get("messages", []):
        found += sorted(set(message) - OPENAI_FIELDS.get(message.get("role"), set()))
        for call in message.get("tool_calls") or []:
            found += sorted(set(call) - {"id", "type", "function"})
            found += sorted(set(call.get("function", {})) - {"name", "arguments"})
    return found


class StrictServer(ReplayServer):
    """A replay server that, like a strict API, refuses any field it does not document."""

    def respond(self, path: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        unknown = undocumented_openai_fields(json.loads(raw))
        if unknown:
            return 400, {"error": {"message": f"unknown fields: {unknown}"}}
        return super().respond(path, raw)


def with_extras() -> ScriptedModel:
    """The over-reaching model, its replies padded with fields that some servers add."""
    def pad(message: dict[str, Any]) -> dict[str, Any]:
        calls = [{**call, "index": index, "function": {**call["function"], "strict": False}}
                 for index, call in enumerate(message.get("tool_calls", []))]
        padded = {**message, "refusal": None, "annotations": []}
        return {**padded, "tool_calls": calls} if calls else padded
    script = overreaching_model()
    return ScriptedModel(turns=[pad(turn) for turn in script.turns],
                         reactions={key: pad(reply) for key, reply in script.reactions.items()})


def test_the_strict_server_refuses_the_extra_fields_sent_back_as_received() -> None:
    with StrictServer(with_extras) as server, httpx.Client(timeout=5) as client:
        first = client.post(f"{server.base_url}/chat/completions",
                            json={"model": "m", "messages": OPENING}).json()
        echoed = [*OPENING, first["choices"][0]["message"]]
        refused = client.post(f"{server.base_url}/chat/completions",
                              json={"model": "m", "messages": echoed})
    assert refused.status_code == 400
    assert "index" in refused.json()["error"]["message"]


def test_the_openai_adapter_sends_back_only_documented_fields() -> None:
    scenario = SCENARIOS["over-reach behind the gate"]
    with StrictServer(with_extras) as server:
        facts = run(scenario, openai_model(server.base_url))
    assert facts == in_process(scenario)
    assert all(undocumented_openai_fields(body) == [] for body in server.received)


def test_the_anthropic_adapter_sends_back_only_documented_block_fields() -> None:
    padded = {"type": "tool_use", "id": "toolu_1", "name": "lookup_order",
              "input": {"order_id": "A-17"}, "caller": {"type": "direct"}, "cache_control": None}
    text = {"type": "text", "text": "Looking.", "citations": None}
    with canned(Reply(200, {**ANTHROPIC_REPLY, "content": [text, padded]}),
                Reply(200, ANTHROPIC_REPLY)) as server:
        tools, _ = make_environment()
        run_agent(TASK, AnthropicModel(base_url=server.url, model="m", tools=tools), tools,
                  refund_gate)
    assistant = server.requests[1]["body"]["messages"][1]
    assert assistant == {"role": "assistant", "content": [
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup_order",
         "input": {"order_id": "A-17"}}]}


# ---------------------------------------------------------------------------------------------
# A malformed tool_use block is an invalid proposal, and the run goes on


def messages_api_problems(request: dict[str, Any]) -> list[str]:
    """What a strict Messages API would refuse in a request's tool_use and tool_result blocks."""
    problems, proposed = [], set()
    for turn in request["messages"]:
        for block in turn["content"] if isinstance(turn["content"], list) else []:
            if block["type"] == "tool_use":
                if not (isinstance(block.get("id"), str) and isinstance(block.get("name"), str)
                        and block["name"] and isinstance(block.get("input"), dict)):
                    problems.append(f"malformed tool_use {block}")
                proposed.add(block.get("id"))
            elif block["type"] == "tool_result" and block.get("tool_use_id") not in proposed:
                problems.append(f"tool_result for no tool_use: {block}")
    return problems


LOOKUP = {"type": "tool_use", "id": "toolu_1", "name": "lookup_order",
          "input": {"order_id": "A-17"}}


@pytest.mark.parametrize("flaw", ["id", "name", "input", "input not an object"])
def test_a_malformed_tool_use_reply_is_answered_as_invalid_and_the_run_goes_on(
        flaw: str) -> None:
    if flaw == "input not an object":
        malformed = {**LOOKUP, "input": 5}
    else:
        malformed = {key: value for key, value in LOOKUP.items() if key != flaw}
    answer = {**ANTHROPIC_REPLY, "content": [{"type": "text", "text": "I could not check."}]}
    with canned(Reply(200, {**ANTHROPIC_REPLY, "content": [malformed]}),
                Reply(200, answer)) as server:
        tools, effects = make_environment()
        model = AnthropicModel(base_url=server.url, model="m", tools=tools)
        result = run_agent(TASK, model, tools, refund_gate)
    assert (result.stop, result.answer, result.state.turns) == (
        Stop.ANSWERED, "I could not check.", 2)
    [observation] = result.state.observations
    assert (observation.ok, observation.kind) == (False, "invalid")
    assert effects == [] and check_run(result, effects, Limits())["observations_correlated"]
    second = server.requests[1]["body"]
    assert messages_api_problems(second) == []
    [use] = second["messages"][1]["content"]
    [answered] = second["messages"][2]["content"]
    assert answered["tool_use_id"] == use["id"] == observation.call_id
    assert answered["is_error"] is True


def test_the_replay_server_still_refuses_to_send_a_call_it_cannot_express() -> None:
    with pytest.raises(ModelError, match="tool call 'h1' has no tool_use form"):
        assistant_to_blocks(HOSTILE)
    _, turns = to_anthropic_messages([*OPENING, HOSTILE], strict=False)
    blocks = turns[1]["content"]
    assert [block["id"] for block in blocks] == [call.call_id for call in parse_tool_calls(HOSTILE)]
    assert all(block["input"] == {} and block["name"] for block in blocks)  # every call malformed


# ---------------------------------------------------------------------------------------------
# Conversations served at once each have their own script


class AnthropicClientModel:
    """The loop's model interface on top of the official ``anthropic`` client."""

    def __init__(self, client: anthropic.Anthropic, tools: dict[str, ToolSpec]) -> None:
        self.client = client
        self.tools = tools

    def chat(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        system, turns = to_anthropic_messages(messages)
        reply = self.client.messages.create(
            model="replay", max_tokens=1024, system=system or "",
            messages=turns, tools=anthropic_tools(self.tools))  # type: ignore[arg-type]
        return blocks_to_assistant([block.model_dump() for block in reply.content])


class Lockstep:
    """Wait for the other run before every request, so that two runs' requests alternate."""

    def __init__(self, model: Any, barrier: threading.Barrier) -> None:
        self.model = model
        self.barrier = barrier

    def chat(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        self.barrier.wait(timeout=10)
        reply: dict[str, Any] = self.model.chat(messages)
        return reply


def clients(base_url: str) -> dict[str, ModelFor]:
    """Every client of the replay server: the two adapters and the two official clients."""
    import openai

    sdk_openai = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=5)
    return {"openai adapter": openai_model(base_url),
            "anthropic adapter": anthropic_model(base_url),
            "openai client": lambda tools: OpenAIClientModel(sdk_openai, tools),
            "anthropic client": lambda tools: AnthropicClientModel(
                anthropic_client(base_url), tools)}


@pytest.mark.parametrize("client", ["openai adapter", "anthropic adapter", "openai client",
                                    "anthropic client"])
def test_two_runs_served_at_once_each_get_their_own_script(client: str) -> None:
    scenario = SCENARIOS["over-reach behind the gate"]
    barrier = threading.Barrier(2)
    facts: dict[int, dict[str, Any]] = {}
    with ReplayServer(scenario.new_model) as server:
        model_for = clients(server.base_url)[client]

        def one_run(number: int) -> None:
            facts[number] = run(scenario, lambda tools: Lockstep(model_for(tools), barrier))

        threads = [threading.Thread(target=one_run, args=(number,)) for number in (1, 2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    assert facts[1] == facts[2] == in_process(scenario)
    assert len(server.received) == 2 * facts[1]["turns"]


def test_two_different_scripts_at_once_keep_apart() -> None:
    """Two tasks whose conversations differ from the first message on, served by one server."""
    barrier = threading.Barrier(2)
    facts: dict[str, dict[str, Any]] = {}
    scenario = SCENARIOS["over-reach behind the gate"]
    other = Scenario(overreaching_model, refund_gate, Stop.ANSWERED,
                     task="Order A-17 arrived damaged, and I am upset.")
    with ReplayServer(overreaching_model) as server:
        def one_run(name: str, chosen: Scenario) -> None:
            facts[name] = run(chosen, lambda tools: Lockstep(
                openai_model(server.base_url)(tools), barrier))

        threads = [threading.Thread(target=one_run, args=pair)
                   for pair in (("one", scenario), ("other", other))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    assert facts["one"] == in_process(scenario)
    assert facts["other"] == in_process(other)


def test_a_request_that_continues_no_conversation_is_refused() -> None:
    midway = transcript("over-reach behind the gate")[:4]
    with ReplayServer(overreaching_model) as server, httpx.Client(timeout=5) as client:
        refused = client.post(f"{server.base_url}/chat/completions",
                              json={"model": "m", "messages": midway})
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (
        "these messages continue no conversation this server had; "
        "start again from the first message")


# ---------------------------------------------------------------------------------------------
# The key stays out of tracebacks rendered with every frame's local variables


def test_tracebacks_with_local_variables_never_show_the_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    settings = {"model": "m", "sleep": lambda seconds: None, "timeout": 0.1,
                "retry": RetryPolicy(max_retries=2)}
    adapters: list[tuple[Callable[[str], Any], dict[str, Any]]] = [
        (lambda url: OpenAICompatibleModel(base_url=url, **settings), COMPLETION),
        (lambda url: AnthropicModel(base_url=url, **settings), ANTHROPIC_REPLY),
    ]
    rendered = []
    for model_for, ok in adapters:
        for error in key_failures(model_for, ok):
            assert error.__cause__ is None and error.__context__ is None
            rendered.append("".join(traceback.TracebackException.from_exception(
                error, capture_locals=True).format()))
    monkeypatch.setenv("OPENAI_API_KEY", f"sk-\x1b{API_KEY}")
    rendered.append("".join(traceback.TracebackException.from_exception(
        failure(OpenAICompatibleModel(base_url=closed_port_url(), model="m")),
        capture_locals=True).format()))
    assert len(rendered) == 13
    assert all("real_models.py" in text for text in rendered)  # our own frames are there
    assert any("key = ApiKey(Authorization: hidden)" in text for text in rendered)
    assert any("key = ApiKey(x-api-key: hidden)" in text for text in rendered)
    assert [text for text in rendered if API_KEY in text] == []


def test_an_api_key_shows_neither_its_value_nor_its_header() -> None:
    key = ApiKey(API_KEY, "Authorization", "Bearer ")
    assert API_KEY not in repr(key) + str(key) + repr([key]) + f"{key}"
    assert key.headers() == {"Authorization": f"Bearer {API_KEY}"}
    assert key.redact(f"got {API_KEY}!") == "got [redacted]!"
    assert ApiKey("", "x-api-key").headers() == {}


# ---------------------------------------------------------------------------------------------
# Smaller points: redirects, the seed, the command line's help


def test_a_redirect_names_where_it_points() -> None:
    location = "https://models.example/v1/chat/completions"
    with canned(Reply(301, b"", {"Location": location})) as server:
        model, waits = recording_model(server.url)
        error = failure(model)
    assert (error.status, error.reason) == (301, f"redirected to {location}; is base_url right?")
    assert waits == [] and len(server.requests) == 1


def test_the_seed_is_sent_only_when_asked_for() -> None:
    with canned(Reply()) as server:
        OpenAICompatibleModel(base_url=server.url, model="m").chat(OPENING)
        OpenAICompatibleModel(base_url=server.url, model="m", seed=3).chat(OPENING)
    assert "seed" not in server.requests[0]["body"]
    assert server.requests[1]["body"]["seed"] == 3


def test_help_documents_every_endpoint_the_server_serves(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        serve_main(["--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    listed = re.findall(r"^  (GET|POST) +(/\S+)", text, flags=re.MULTILINE)
    assert listed == [("POST", "/v1/chat/completions"), ("POST", "/v1/messages"),
                      ("GET", "/v1/models")]
    assert "Streaming is not supported" in text and "Conversations:" in text
    with ReplayServer(overreaching_model) as server, httpx.Client(timeout=5) as client:
        root = server.base_url.removesuffix("/v1")
        for method, path in listed:
            body = {"model": "m", "max_tokens": 10, "messages": OPENING[1:]}
            reply = client.request(method, root + path,
                                   json=body if method == "POST" else None)
            assert reply.status_code == 200, path
        unlisted = client.post(root + "/v1/completions", json={"prompt": "hi"})
    assert unlisted.status_code == 404
