"""The model adapters against servers that misbehave: truncated and refused replies, bodies
that no decoder should trust, retries as the official SDKs do them, replies too large to
hold, and a replay server fed hostile requests. Every server is local and stops by itself."""

from __future__ import annotations

import email.utils
import gzip
import http.client
import json
import re
import socket
import subprocess
import sys
import threading
import time
import traceback
import zlib
from typing import Any

import pytest

from agentbook import real_models
from agentbook.anatomy import (
    Stop,
    make_environment,
    overreaching_model,
    refund_gate,
    run_agent,
    tool_call_message,
)
from agentbook.real_models import (
    MAX_JSON_DEPTH,
    THINKING_KEY,
    AnthropicModel,
    ApiKey,
    ModelError,
    OpenAICompatibleModel,
    RefusedReply,
    ReplayServer,
    RetryPolicy,
    TruncatedReply,
    decode_json,
    retry_delay,
    server_wait,
)
from test_real_models import (
    API_KEY,
    COMPLETION,
    OPENING,
    TASK,
    Reply,
    canned,
    closed_port_url,
    failure,
    hostile,
    recording_model,
)

REFUND = {"order_id": "A-17", "amount_cents": 4999}


def completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}


def anthropic_reply(blocks: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": blocks, "stop_reason": stop}


REFUND_CALL = tool_call_message("t1", "refund_order", REFUND)
REFUND_USE = {"type": "tool_use", "id": "t1", "name": "refund_order", "input": REFUND}


def run_against(model: Any) -> tuple[BaseException, list[dict[str, Any]]]:
    """Run the refund task with ``model``; the exception it ended with, and the effects."""
    tools, effects = make_environment()
    model.tools = tools
    with pytest.raises(ModelError) as caught:
        run_agent(TASK, model, tools, refund_gate)
    return caught.value, effects


# ---------------------------------------------------------------------------------------------
# 1. A reply cut short or refused never acts


@pytest.mark.parametrize(("adapter", "body"), [
    ("openai", completion(REFUND_CALL, "length")),
    ("anthropic", anthropic_reply([REFUND_USE], "max_tokens")),
])
def test_a_truncated_tool_call_never_runs(adapter: str, body: dict[str, Any]) -> None:
    with canned(Reply(200, body)) as server:
        model_class = OpenAICompatibleModel if adapter == "openai" else AnthropicModel
        model = model_class(base_url=server.url, model="m")
        error, effects = run_against(model)
    assert isinstance(error, TruncatedReply)
    assert effects == []  # the refund did not run
    assert error.stop_reason == model.stop_log[-1] == (
        "length" if adapter == "openai" else "max_tokens")
    assert "truncated" in error.reason and "none of its tool calls ran" in error.reason


def test_cut_off_text_does_not_end_the_run_as_answered() -> None:
    cut = {"role": "assistant", "content": "I have refunded your order and"}
    with canned(Reply(200, completion(cut, "length"))) as server:
        error, _ = run_against(OpenAICompatibleModel(base_url=server.url, model="m"))
    assert isinstance(error, TruncatedReply)
    assert str(error) == "HTTP 200: the reply was truncated (length); none of its tool calls ran"


@pytest.mark.parametrize(("adapter", "body", "reason"), [
    ("openai", completion({"role": "assistant", "content": None,
                           "refusal": "I can't help with that."}, "stop"),
     "the model refused (stop): I can't help with that."),
    ("openai", completion({"role": "assistant", "content": ""}, "content_filter"),
     "the model refused (content_filter)"),
    ("anthropic", anthropic_reply([], "refusal"), "the model refused (refusal)"),
])
def test_a_refusal_is_a_refused_reply_not_an_empty_answer(
        adapter: str, body: dict[str, Any], reason: str) -> None:
    with canned(Reply(200, body)) as server:
        model_class = OpenAICompatibleModel if adapter == "openai" else AnthropicModel
        error, effects = run_against(model_class(base_url=server.url, model="m"))
    assert isinstance(error, RefusedReply) and error.reason == reason and effects == []


def test_every_reply_leaves_its_stop_reason_and_usage_in_the_logs() -> None:
    with ReplayServer(overreaching_model) as server:
        tools, _ = make_environment()
        model = AnthropicModel(base_url=server.base_url, model="replay", tools=tools)
        result = run_agent(TASK, model, tools, refund_gate)
    assert result.stop is Stop.ANSWERED
    assert model.stop_log == ["tool_use", "tool_use", "tool_use", "end_turn"]
    assert len(model.usage_log) == 4


# ---------------------------------------------------------------------------------------------
# 2. One exception type, and no key in any traceback


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


HOSTILE_BODIES = {
    "nested a million deep": nested(1_000_000),
    "NaN": b'{"choices": [{"message": {"role": "assistant", "content": NaN}}]}',
    "Infinity": b'{"x": -Infinity}',
    "a number no float holds": b'{"x": 1e400}',
    "bad UTF-8": b'{"x": "\xff"}',
}


@pytest.mark.parametrize("name", HOSTILE_BODIES)
def test_a_body_no_decoder_should_trust_is_a_model_error(name: str) -> None:
    with canned(Reply(200, HOSTILE_BODIES[name])) as server:
        error = failure(recording_model(server.url)[0])
    assert error.status == 200 and error.reason.startswith("the reply is not JSON")


def test_json_is_decoded_to_the_depth_limit_and_no_further() -> None:
    inside_a_string = json.dumps({"text": "[" * 1000})
    assert decode_json(inside_a_string) == {"text": "[" * 1000}  # brackets in text don't count
    assert decode_json(nested(MAX_JSON_DEPTH)) == json.loads(nested(MAX_JSON_DEPTH))
    with pytest.raises(ValueError, match="nested deeper than 64 levels"):
        decode_json(nested(MAX_JSON_DEPTH + 1))


def test_a_deeply_nested_error_body_is_retried_then_a_model_error() -> None:
    with canned(Reply(503, nested(100_000))) as server:
        model, waits = recording_model(server.url)
        error = failure(model)
    assert error.status == 503 and error.reason.endswith("(gave up after 4 attempts)")
    assert len(waits) == 3


def failure_of(model: Any, messages: list[dict[str, Any]]) -> ModelError:
    with pytest.raises(ModelError) as caught:
        model.chat(messages)
    return caught.value


def test_a_nan_the_run_picked_up_is_refused_before_sending() -> None:
    with canned(Reply()) as server:
        model, _ = recording_model(server.url)
        error = failure_of(model, [*OPENING, {"role": "tool", "tool_call_id": "x",
                                              "content": float("nan")}])
        assert server.requests == []  # nothing was sent
    assert error.reason == "the request is not standard JSON (ValueError)"


def test_a_200_carrying_an_error_envelope_gives_the_servers_message() -> None:
    with canned(Reply(200, {"error": {"message": "model is loading", "code": 503}})) as server:
        error = failure(recording_model(server.url)[0])
    assert (error.status, error.reason) == (200, "model is loading")


def rendered(error: BaseException) -> str:
    return "".join(traceback.TracebackException.from_exception(
        error, capture_locals=True).format())


@pytest.mark.parametrize("adapter", ["openai", "anthropic"])
def test_no_failure_leaves_an_httpx_frame_or_the_key_in_its_traceback(
        adapter: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    model_class = OpenAICompatibleModel if adapter == "openai" else AnthropicModel
    unfinished = (completion(REFUND_CALL, "length") if adapter == "openai"
                  else anthropic_reply([REFUND_USE], "max_tokens"))
    errors: list[BaseException] = []
    replies = [Reply(200, body) for body in HOSTILE_BODIES.values()] + [
        Reply(503, nested(100_000)), Reply(200, b"x" * 100, {"Content-Encoding": "gzip"}),
        Reply(reset=True), Reply(200, unfinished)]
    retry = RetryPolicy(max_retries=1, random=lambda: 0.0)
    for reply in replies:
        with canned(reply) as server:
            model = model_class(base_url=server.url, model="m", retry=retry,
                                sleep=lambda seconds: None)
            errors.append(failure(model))
    errors.append(failure(model_class(base_url=closed_port_url(), model="m",
                                      retry=RetryPolicy(max_retries=0))))
    texts = [rendered(error) for error in errors]
    assert all(isinstance(error, ModelError) for error in errors)
    assert all(error.__cause__ is None and error.__context__ is None for error in errors)
    assert [text for text in texts if API_KEY in text] == []
    assert [text for text in texts if re.search(r'File "[^"]*/(httpx|httpcore)/', text)] == []
    assert all("real_models.py" in text for text in texts)  # the frames were rendered


def test_running_out_of_file_descriptors_is_a_model_error() -> None:
    """In a process of its own, whose limit on open files is lowered to what it has open."""
    probe = """
import os, resource
from agentbook.real_models import ModelError, OpenAICompatibleModel, RetryPolicy
import ctypes, httpx  # loaded before the limit, as after any first request
# glibc loads libgcc_s when a thread is ended at exit (the watchdog's timer
# may be), and aborts the process if it cannot: load it while it still can.
ctypes.CDLL("libgcc_s.so.1")
model = OpenAICompatibleModel(base_url="http://127.0.0.1:9/v1", model="m",
                              retry=RetryPolicy(max_retries=0))
used = len(os.listdir("/proc/self/fd")) - 1  # less the one listdir held
resource.setrlimit(resource.RLIMIT_NOFILE, (used, used))
try:
    model.chat([{"role": "user", "content": "hi"}])
except ModelError as error:
    print("ModelError:", error)
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("ModelError: "), done.stdout


# ---------------------------------------------------------------------------------------------
# 3. Retries that listen


def test_retry_after_30_is_waited_for_and_the_call_succeeds() -> None:
    with canned(Reply(429, {}, {"Retry-After": "30"}), Reply()) as server:
        model, waits = recording_model(server.url)
        assert model.chat(OPENING)["content"] == "Done."
    assert waits == [30.0]


def test_an_http_date_and_retry_after_ms_are_honored() -> None:
    soon = email.utils.formatdate(time.time() + 30, usegmt=True)
    with canned(Reply(503, {}, {"Retry-After": soon}),
                Reply(503, {}, {"retry-after-ms": "1500", "Retry-After": "9"}),
                Reply()) as server:
        model, waits = recording_model(server.url)
        model.chat(OPENING)
    assert 20 < waits[0] <= 30  # the date, read against this machine's clock
    assert waits[1] == 1.5  # milliseconds come first, as in the SDKs


def test_server_wait_reads_each_spelling_and_refuses_nonsense() -> None:
    now = 1_000_000_000.0
    date = email.utils.formatdate(now + 12, usegmt=True)
    assert server_wait({"retry-after": date}, now=lambda: now) == 12.0
    assert server_wait({"retry-after": email.utils.formatdate(now - 60, usegmt=True)},
                       now=lambda: now) == 0.0  # a date in the past: no wait
    for nonsense in ("soon", "-3", "nan", ""):
        assert server_wait({"retry-after": nonsense}) is None
    assert server_wait({"retry-after": "1e999"}) == float("inf")
    assert retry_delay(RetryPolicy(), 0, {"retry-after": "1e999"}) is None  # give up


def test_zero_means_the_jittered_backoff_and_every_wait_is_drawn_from_its_range() -> None:
    draws = iter([0.25, 0.5, 0.75])
    policy = RetryPolicy(random=lambda: next(draws))
    with canned(Reply(503, {}, {"Retry-After": "0"})) as server:
        model, waits = recording_model(server.url, retry=policy)
        failure(model)
    assert waits == [0.5 * 0.25, 1.0 * 0.5, 2.0 * 0.75]
    # The default draws at random: the same failure waits differently from call to call.
    assert len({retry_delay(RetryPolicy(), 2, {}) for _ in range(20)}) > 1
    assert all(0 <= retry_delay(RetryPolicy(), 2, {}) <= 2.0 for _ in range(20))  # type: ignore[operator]


@pytest.mark.parametrize(("status", "headers", "attempts"), [
    (408, {}, 2), (409, {}, 2), (500, {}, 2), (599, {}, 2),
    (503, {"x-should-retry": "false"}, 1),
    (400, {"x-should-retry": "true"}, 2),
    (400, {}, 1), (404, {}, 1),
])
def test_which_failures_are_retried(status: int, headers: dict[str, str],
                                    attempts: int) -> None:
    with canned(Reply(status, {}, headers), Reply()) as server:
        model, _ = recording_model(server.url)
        if attempts == 2:
            assert model.chat(OPENING)["content"] == "Done."
        else:
            assert failure(model).status == status
    assert len(server.requests) == attempts


def test_a_reset_connection_is_retried() -> None:
    with canned(Reply(reset=True), Reply()) as server:
        model, waits = recording_model(server.url)
        assert model.chat(OPENING)["content"] == "Done."
    assert waits == [0.5] and len(server.requests) == 2


# ---------------------------------------------------------------------------------------------
# 4. Bounded replies


def gzipped(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=1, mtime=0)  # the same bytes on every run


@pytest.mark.parametrize(("body", "encoding", "reason"), [
    (b"x" * 2001, "", "the reply was refused: it is larger than 2,000 bytes"),
    (gzipped(b" " * 100_000), "gzip", "the reply was refused: it is larger than 2,000 bytes"),
    (gzipped(json.dumps(COMPLETION).encode())[:-12], "gzip",
     "the reply was refused: its compressed data is cut short"),
    (b"not gzip at all", "gzip", "the reply was refused: its compressed data is damaged"),
    (b"{}", "br", "the reply was refused: it has an unsupported encoding: br"),
], ids=["too large", "too large inflated", "cut short", "damaged", "brotli"])
def test_a_reply_too_large_or_undecodable_is_refused(body: bytes, encoding: str,
                                                     reason: str) -> None:
    headers = {"Content-Encoding": encoding} if encoding else {}
    with canned(Reply(200, body, headers)) as server:
        error = failure(recording_model(server.url, max_reply_bytes=2000)[0])
    assert (error.status, error.reason) == (None, reason)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_reply_within_the_limit_is_read(encoding: str) -> None:
    data = json.dumps(COMPLETION).encode()
    body = gzipped(data) if encoding == "gzip" else zlib.compress(data)
    with canned(Reply(200, body, {"Content-Encoding": encoding})) as server:
        assert recording_model(server.url)[0].chat(OPENING)["content"] == "Done."
    assert server.requests[0]["headers"]["accept-encoding"] == "gzip, deflate"


BOMB_PROBE = """
import gzip, json, resource, sys, threading, zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from agentbook.real_models import ModelError, OpenAICompatibleModel, RetryPolicy

INFLATED = 1000 * 2**20  # what the body inflates to: 1,000 MiB of spaces

class Bomb(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Encoding", "gzip")
        self.end_headers()
        # Compressed as it is sent; the client hangs up long before the end.
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        chunk = b" " * 2**20
        try:
            for _ in range(INFLATED // len(chunk)):
                self.wfile.write(packer.compress(chunk))
            self.wfile.write(packer.flush())
        except OSError:
            pass
    def log_message(self, *args):
        pass

http = ThreadingHTTPServer(("127.0.0.1", 0), Bomb)
threading.Thread(target=http.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{http.server_port}/v1"
model = OpenAICompatibleModel(base_url=url, model="m", retry=RetryPolicy(max_retries=0))
import httpx  # loaded before the first measure, as after any first request
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    model.chat([{"role": "user", "content": "hi"}])
except ModelError as error:
    reason = error.reason
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"reason": reason, "growth_kib": after - before}))
http.shutdown()
"""


def test_a_gzip_bomb_is_refused_without_inflating_it() -> None:
    """Peak memory (ru_maxrss, in KiB on Linux) of a process of its own, before and after."""
    done = subprocess.run([sys.executable, "-c", BOMB_PROBE], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["reason"] == "the reply was refused: it is larger than 4,194,304 bytes"
    assert outcome["growth_kib"] < 100 * 1024  # under 100 MB, against 1,000 MiB inflated


# ---------------------------------------------------------------------------------------------
# 5. A replay server that survives load and hostile requests


def raw_exchange(port: int, request: bytes) -> tuple[int, dict[str, Any]]:
    """Send ``request`` as bytes; the status and JSON body that come back."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(request)
        conn.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"application/json" in head
    return int(head.split()[1]), json.loads(body)


def post(path: str, body: bytes, length: str | None) -> bytes:
    header = f"Content-Length: {length}\r\n" if length is not None else ""
    return f"POST {path} HTTP/1.1\r\nHost: x\r\n{header}\r\n".encode() + body


@pytest.mark.parametrize(("request_bytes", "status", "message"), [
    (post("/v1/chat/completions", b"{}", "\u00b2"), 400,
     "Content-Length is not a number of bytes"),
    (post("/v1/chat/completions", b"{}", None), 411, "a POST needs a Content-Length header"),
    (post("/v1/chat/completions", b"", str(10**9)), 413, "the request is over 8,388,608 bytes"),
    (post("/v1/chat/completions", nested(100_000), "200000"), 400,
     "the request body is not JSON: nested deeper than 64 levels"),
    (b"GARBAGE\r\n\r\n", 400, "Bad request syntax ('GARBAGE')"),
], ids=["superscript length", "no length", "too long", "too deep", "no request line"])
def test_a_bad_request_gets_a_json_4xx_and_nothing_on_stderr(
        request_bytes: bytes, status: int, message: str,
        capfd: pytest.CaptureFixture[str]) -> None:
    with ReplayServer(overreaching_model) as server:
        port = int(server.base_url.split(":")[2].split("/")[0])
        answer = raw_exchange(port, request_bytes)
    assert answer == (status, {"error": {"message": message}})
    assert capfd.readouterr().err == ""


def test_many_clients_at_once_are_all_served() -> None:
    with ReplayServer(overreaching_model) as server:
        assert server._http.request_queue_size >= 128
        host, port = server._http.server_address[:2]
        statuses: list[int] = []

        def one_request() -> None:
            connection = http.client.HTTPConnection(host, port, timeout=10)
            connection.request("GET", "/v1/models")
            statuses.append(connection.getresponse().status)
            connection.close()

        threads = [threading.Thread(target=one_request) for _ in range(64)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)
    assert statuses == [200] * 64


def test_a_failed_reply_does_not_advance_the_conversation() -> None:
    """The script's reply has no Messages API form: every retry hears the same error."""
    with ReplayServer(hostile) as server:
        model = AnthropicModel(base_url=server.base_url, model="replay",
                               retry=RetryPolicy(max_retries=2, random=lambda: 0.0),
                               sleep=lambda seconds: None)
        error = failure(model)
    assert error.status == 500
    assert error.reason.startswith("tool call 'h1' has no tool_use form")
    assert error.reason.endswith("(gave up after 3 attempts)")


def test_old_conversations_are_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(real_models, "MAX_CONVERSATIONS", 3)
    with ReplayServer(overreaching_model) as server:
        models = [OpenAICompatibleModel(base_url=server.base_url, model="replay")
                  for _ in range(4)]
        firsts = [[*OPENING[:1], {"role": "user", "content": f"task {n}"}] for n in range(4)]
        replies = [model.chat(messages) for model, messages in zip(models, firsts, strict=True)]
        assert len(server._conversations) == 3
        with pytest.raises(ModelError, match="continue no conversation"):
            models[0].chat([*firsts[0], replies[0], {"role": "user", "content": "and?"}])
        models[3].chat([*firsts[3], replies[3], {"role": "user", "content": "and?"}])


# ---------------------------------------------------------------------------------------------
# 7. The smaller ones


def test_arguments_sent_as_an_object_are_normalized_and_the_run_goes_on() -> None:
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "refund_order", "arguments": REFUND}}]}
    done = completion({"role": "assistant", "content": "Refunded."}, "stop")
    with canned(Reply(200, completion(call, "tool_calls")), Reply(200, done)) as server:
        tools, effects = make_environment()
        model = OpenAICompatibleModel(base_url=server.url, model="m", tools=tools)
        result = run_agent(TASK, model, tools, lambda call: (True, "ok"))
    assert result.stop is Stop.ANSWERED and len(effects) == 1
    assert result.state.messages[2]["tool_calls"][0]["function"]["arguments"] == json.dumps(
        REFUND)


def test_thinking_blocks_go_back_with_the_tool_result() -> None:
    thinking = [{"type": "thinking", "thinking": "Check the order first.", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"}]
    lookup = {"type": "tool_use", "id": "t1", "name": "lookup_order",
              "input": {"order_id": "A-17"}}
    with canned(Reply(200, anthropic_reply([*thinking, lookup], "tool_use")),
                Reply(200, anthropic_reply([{"type": "text", "text": "Done."}],
                                           "end_turn"))) as server:
        tools, _ = make_environment()
        model = AnthropicModel(base_url=server.url, model="m", tools=tools)
        result = run_agent(TASK, model, tools, refund_gate)
    assert result.state.messages[2][THINKING_KEY] == thinking
    assistant_turn = server.requests[1]["body"]["messages"][1]
    assert assistant_turn == {"role": "assistant", "content": [*thinking, lookup]}


@pytest.mark.parametrize("limits", [
    {"deadline": float("inf")}, {"timeout": float("nan")}, {"deadline": 0},
])
def test_a_deadline_or_timeout_that_is_not_a_finite_positive_number_is_refused(
        limits: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="positive, finite"):
        OpenAICompatibleModel(base_url="http://127.0.0.1:9/v1", model="m", **limits)


@pytest.mark.parametrize("size", [0, -1, 2.5])
def test_a_reply_size_that_bounds_nothing_is_refused(size: Any) -> None:
    with pytest.raises(ValueError, match="max_bytes must be a positive int"):
        AnthropicModel(model="m", max_reply_bytes=size)


def test_an_empty_compressed_error_reply_is_still_retried() -> None:
    with canned(Reply(503, b"", {"Content-Encoding": "gzip"}), Reply()) as server:
        model, waits = recording_model(server.url)
        assert model.chat(OPENING)["content"] == "Done."
    assert waits == [0.5]


def test_a_client_that_goes_silent_mid_request_is_let_go(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(real_models, "REQUEST_TIMEOUT", 0.2)
    with ReplayServer(overreaching_model) as server:
        address = server._http.server_address[:2]
        with socket.create_connection(address, timeout=5) as conn:
            conn.sendall(post("/v1/chat/completions", b"{", "10"))  # 9 bytes short
            started = time.monotonic()
            assert conn.recv(1) == b""  # closed by the server, without a reply
            assert time.monotonic() - started < 3
    assert capfd.readouterr().err == ""


def test_keys_of_any_length_are_redacted_without_garbling_the_text() -> None:
    text = "model ollama not found; the task asks for ollamas"
    assert ApiKey("ollama", "x").redact(text) == (
        "model [redacted] not found; the task asks for ollamas")
    assert ApiKey("sk", "x").redact("task sk done") == "task [redacted] done"
    long_key = "sk-" + "a1" * 10
    assert ApiKey(long_key, "x").redact(f"Bearer{long_key}!") == "Bearer[redacted]!"


def test_no_proxy_stands_between_the_adapter_and_this_machine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with canned(Reply()) as proxy, canned(Reply()) as server:
        for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
            monkeypatch.setenv(name, proxy.url.removesuffix("/v1"))
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        assert recording_model(server.url)[0].chat(OPENING)["content"] == "Done."
    assert proxy.requests == [] and len(server.requests) == 1
