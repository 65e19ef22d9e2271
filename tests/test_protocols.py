"""Chapter 4's MCP half: the desk's server, the kernel's client, pins, and hostile servers.

The desk's real server (the SDK's, about a second to start) is started once for the file;
the hostile servers are tests/mcp_fake_server.py, a standard-library script that starts in a
few hundredths of a second, one per case. Everything that needs no process at all (pins,
schemas, results, the server's gate) runs in this one, the server through the SDK's
in-process client.
"""

import json
import os
import signal
import sys
import threading
import time
import tomllib
from random import Random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp import types as mcp_types

from agentbook import (
    MCPTool,
    Meter,
    ProvenancePolicy,
    ScriptedModel,
    ToolCall,
    ToolServerError,
    ToolSpec,
    allow_all,
    check_pins,
    combine_tools,
    contract_schema,
    distrust_server,
    every_gate,
    execute_call,
    find_refund_instruction,
    make_environment,
    mcp_tools,
    obedient_model,
    overreaching_model,
    pin_tools,
    refund_gate,
    result_content,
    run_agent,
    run_parallel,
    schema_problem,
    served_tools,
    tool_call_message,
    tool_server,
)
from agentbook.protocols import _main

REPO_ROOT = Path(__file__).resolve().parent.parent
DESK = [sys.executable, "-m", "agentbook.protocols", "serve"]
FAKE = str(Path(__file__).with_name("mcp_fake_server.py"))
TASK = "Order A-17 arrived damaged. Please make this right."


def fake(mode: str) -> list[str]:
    return [sys.executable, FAKE, mode]


@pytest.fixture(scope="module")
def desk() -> Iterator[dict[str, ToolSpec]]:
    """The desk's server, served over stdio by the real SDK, for the whole file."""
    with mcp_tools(DESK) as tools:
        yield tools


def children() -> dict[int, str]:
    """This process's child processes and their states, read from /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if entry.name.isdigit() and int(fields[1]) == os.getpid():
            found[int(entry.name)] = fields[0]
    return found


def listed(name: str = "lookup_order", description: str = "Fetch an order.",
           schema: dict[str, Any] | None = None) -> mcp_types.Tool:
    schema = schema or {"type": "object", "properties": {"order_id": {"type": "string"}}}
    return mcp_types.Tool(name=name, description=description, input_schema=schema)


def never(name: str, arguments: dict[str, Any]) -> Any:
    raise AssertionError(f"{name} was sent")


# ---------------------------------------------------------------------------------------------
# The desk's server and the kernel's client


def test_the_served_desk_runs_as_the_local_one(desk: dict[str, ToolSpec]) -> None:
    local, _ = make_environment()
    assert list(desk) == list(local)
    assert all(isinstance(spec, MCPTool) and spec.effectful for spec in desk.values())
    assert {name: spec.input_schema for name, spec in desk.items()} == {
        name: contract_schema(spec) for name, spec in local.items()}
    here = run_agent(TASK, overreaching_model(), local, refund_gate)
    there = run_agent(TASK, overreaching_model(), desk, refund_gate)
    assert there.state.messages == here.state.messages


def test_the_servers_gate_refuses_what_a_client_lets_through(desk: dict[str, ToolSpec]) -> None:
    call = ToolCall("c", "refund_order", {"order_id": "A-17", "amount_cents": 999999})
    seen = execute_call(call, desk, allow_all)
    assert (seen.kind, seen.content) == (
        "error", "refund_order failed on the server: denied: refund exceeds automatic "
                 "authority of 5000 cents")


def test_no_call_from_any_client_reaches_a_handler_the_gate_refuses() -> None:
    """A client of the SDK's own, which gates nothing, against the server in process, where
    the effect log can be read: the gate refuses before the handler runs."""
    tools, effects = make_environment()

    async def calls() -> list[bool]:
        async with Client(tool_server(tools, refund_gate)) as client:
            results = [await client.call_tool("refund_order", arguments)
                       for arguments in ({"order_id": "A-17", "amount_cents": 999999},
                                         {"order_id": "A-17", "amount_cents": "4999"},
                                         {"order_id": "A-17", "amount_cents": 4999})]
            return [result.is_error for result in results]

    assert anyio.run(calls) == [True, True, False]
    assert effects == [{"order_id": "A-17", "refunded_cents": 4999}]


def test_handlers_may_be_called_from_several_threads(desk: dict[str, ToolSpec]) -> None:
    draft = ScriptedModel(turns=[{"role": "assistant", "content": "Refunded 4999."}])
    assert run_parallel(draft, desk, refund_gate, Meter()) == "Refunded 4999."


def test_a_handler_called_after_the_block_says_the_connection_is_closed() -> None:
    with mcp_tools(fake("plain")) as tools:
        pass
    seen = execute_call(ToolCall("c", "lookup_order", {"order_id": "A-17"}), tools, allow_all)
    assert (seen.kind, seen.content) == ("error", "lookup_order: the server's connection is "
                                                  "closed")
    with pytest.raises(ToolServerError):  # a ValueError, which the loop records
        tools["lookup_order"].handler(order_id="A-17")


def test_arguments_it_cannot_use_are_refused_before_a_server_starts() -> None:
    before = set(children())
    refused: list[tuple[type[Exception], str, dict[str, Any]]] = [
        (TypeError, "non-empty list of strings", {"command": "python -m agentbook.protocols"}),
        (TypeError, "non-empty list of strings", {"command": []}),
        (TypeError, "non-empty list of strings", {"command": [sys.executable, 3]}),
        (TypeError, "pins must map tool names", {"pins": ["lookup_order"]}),
        (TypeError, "pins must map tool names", {"pins": {"lookup_order": 1}}),
        *((ValueError, "timeout must be a positive", {"timeout": timeout})
          for timeout in (0, -1, float("nan"), float("inf"), True, "5"))]
    for kind, message, arguments in refused:
        with pytest.raises(kind, match=message):
            with mcp_tools(**{"command": fake("plain"), **arguments}):
                raise AssertionError("a server started")
    assert set(children()) == before


def test_a_server_that_cannot_start_says_why() -> None:
    with pytest.raises(ConnectionError, match="the server said: fatal: no configuration found"):
        with mcp_tools(fake("crash"), timeout=5):
            pass
    with pytest.raises(ConnectionError, match="FileNotFoundError: .* 'no-such-server-command'"):
        with mcp_tools(["no-such-server-command"], timeout=5):
            pass


def test_serve_without_its_word_prints_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["serve", "now"]) == 2
    assert capsys.readouterr().err == "usage: python -m agentbook.protocols serve\n"


def test_the_protocols_extra_pins_what_requirements_pin() -> None:
    extra = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["protocols"]
    pinned = (REPO_ROOT / "requirements.txt").read_text().splitlines()
    assert extra and all(requirement in pinned for requirement in extra)


# ---------------------------------------------------------------------------------------------
# Pins


def test_a_pin_covers_name_description_and_schema() -> None:
    schema = {"type": "object", "properties": {"order_id": {"type": "string"}}}
    base = pin_tools(served_tools([listed(schema=schema)], never))["lookup_order"]
    wider = {**schema, "properties": {"order_id": {"type": "string", "maxLength": 9}}}
    for changed in (listed(description="Fetch an order!", schema=schema),
                    listed(schema=wider)):
        assert pin_tools(served_tools([changed], never))["lookup_order"] != base
    renamed = pin_tools(served_tools([listed("lookup_order2", schema=schema)], never))
    assert renamed["lookup_order2"] != base
    swapped = served_tools([listed("a", "one"), listed("b", "two")], never)
    crossed = served_tools([listed("a", "two"), listed("b", "one")], never)
    assert all(pin_tools(swapped)[n] != pin_tools(crossed)[n] for n in "ab")


def test_pins_ignore_the_order_of_tools_and_keys() -> None:
    def shuffled(value: Any, random: Random) -> Any:
        if isinstance(value, dict):
            items = list(value.items())
            random.shuffle(items)
            return {key: shuffled(item, random) for key, item in items}
        return [shuffled(item, random) for item in value] if isinstance(value, list) else value

    schema = {"type": "object", "required": ["order_id", "note"], "$defs": {
        "id": {"type": "string", "pattern": "^[A-Z]-[0-9]+$", "examples": ["A-17", "B-22"]}},
        "properties": {"order_id": {"$ref": "#/$defs/id", "description": "Whose, é ∅."},
                       "note": {"type": "string", "enum": ["a", "b", 1, True, None]}}}
    tools = {"a": MCPTool("Fetch.", {"order_id": str}, never, input_schema=schema),
             "b": MCPTool("Read.", {}, never, input_schema={"type": "object"})}
    for seed in range(20):
        random = Random(seed)
        again = {name: MCPTool(spec.description, spec.schema, never,
                               input_schema=shuffled(spec.input_schema, random))
                 for name, spec in shuffled(tools, random).items()}
        assert pin_tools(again) == pin_tools(tools)
    assert pin_tools(tools)["a"] != pin_tools({"a": MCPTool(
        "Fetch.", {"order_id": str}, never, input_schema={**schema, "required": ["order_id"]})})


def test_kernel_tools_are_pinned_by_the_schema_of_their_contract(
        desk: dict[str, ToolSpec]) -> None:
    assert pin_tools(make_environment()[0]) == pin_tools(desk)


def test_check_pins_names_every_new_and_changed_tool() -> None:
    tools = served_tools([listed("a"), listed("b"), listed("c")], never)
    pins = pin_tools(tools)
    del pins["a"]
    pins["b"] = "0" * 64
    with pytest.raises(ValueError, match=r"'a' \(new\), 'b' \(changed\); review them"):
        check_pins(tools, pins)
    check_pins(served_tools([listed("c")], never), pins)  # one that went away is no change


def test_with_pins_a_changed_server_is_refused_before_the_block_runs() -> None:
    with mcp_tools(fake("plain")) as tools:
        approved = pin_tools(tools)
    with mcp_tools(fake("plain"), pins=approved) as tools:
        assert list(tools) == ["lookup_order"]
    approved["lookup_order"] = "0" * 64
    with pytest.raises(ValueError, match="'lookup_order' \\(changed\\)"):
        with mcp_tools(fake("plain"), pins=approved):
            raise AssertionError("the block ran")


def test_a_list_changed_notice_changes_nothing_in_the_session() -> None:
    with mcp_tools(fake("rug-midway")) as tools:
        approved = pin_tools(tools)
        description = tools["lookup_order"].description
        first = tools["lookup_order"].handler(order_id="A-17")
        second = tools["lookup_order"].handler(order_id="A-17")
        assert first == second == {"order_id": "A-17", "status": "damaged"}
        assert tools["lookup_order"].description == description == "Fetch an order."
    with mcp_tools(fake("rug-midway"), pins=approved) as tools:  # a new session, as listed
        assert pin_tools(tools) == approved


# ---------------------------------------------------------------------------------------------
# Names, schemas and results a server writes


def test_a_look_alike_name_is_refused() -> None:
    with pytest.raises(ValueError, match=r"tool 'lookup_\\u043erder': not a name MCP allows"):
        with mcp_tools(fake("lookalike")):
            pass


def test_a_name_listed_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="tool lookup_order: listed twice"):
        with mcp_tools(fake("duplicate")):
            pass


def test_a_server_cannot_shadow_a_local_tool() -> None:
    desk, _ = make_environment()
    shadow = served_tools([listed("refund_order")], never)
    with pytest.raises(ValueError, match="tool refund_order is offered twice"):
        combine_tools(desk, shadow)
    assert list(combine_tools(desk, served_tools([listed("track")], never))) == [
        *desk, "track"]


def test_an_argument_the_contract_cannot_state_refuses_the_tool() -> None:
    with pytest.raises(ValueError, match="argument 'ids' has type 'array'"):
        with mcp_tools(fake("array-arg")):
            pass
    for schema in ({"type": "array"}, {"type": "object", "properties": {"x": {}}},
                   {"type": "object", "properties": {"x": {"type": ["string", "null"]}}},
                   {"type": "object", "properties": {"x": {"type": "nonsense"}}}):
        with pytest.raises(ValueError, match="tool t: "):
            served_tools([listed("t", schema=schema)], never)


def test_every_served_tool_counts_as_effectful() -> None:
    with mcp_tools(fake("read-only")) as tools:
        assert tools["lookup_order"].effectful
        policy = ProvenancePolicy(["no order named here"])
        watched = policy.wrap(tools)
        allowed, why = policy(ToolCall("c", "lookup_order", {"order_id": "A-17"}))
        assert (allowed, watched["lookup_order"].effectful) == (True, True)
        assert why == "no argument came from untrusted text"  # judged, not waved through


def test_the_contract_and_the_schema_must_both_pass() -> None:
    schema = {"type": "object", "required": ["amount_cents"],
              "properties": {"amount_cents": {"type": "integer", "minimum": 1}}}
    sent: list[dict[str, Any]] = []
    tools = served_tools([listed("refund", schema=schema)],
                         lambda name, arguments: sent.append(arguments) or "sent")
    kinds = [execute_call(ToolCall("c", "refund", arguments), tools, allow_all).kind
             for arguments in ({"amount_cents": 5.0}, {"amount_cents": 5, "note": "x"},
                               {"amount_cents": True}, {"amount_cents": 0},
                               {"amount_cents": 5})]
    assert kinds == ["invalid", "invalid", "invalid", "error", "result"]
    assert sent == [{"amount_cents": 5}]


def test_an_unresolvable_schema_refuses_the_call() -> None:
    remote = {"type": "object", "properties": {"x": {
        "type": "string", "$ref": "https://example.invalid/schema.json"}}}
    tools = served_tools([listed("t", schema=remote)], never)
    seen = execute_call(ToolCall("c", "t", {"x": "a"}), tools, allow_all)
    assert seen.kind == "error"
    assert "inputSchema cannot be checked" in seen.content


def test_a_schema_that_cannot_be_read_refuses_the_tool() -> None:
    order = {"order_id": {"type": "string"}}
    for schema, why in (
            ({"$schema": "https://example.invalid/draft", "type": "object",
              "properties": order}, "its \\$schema names a draft jsonschema lacks"),
            ({"type": "object", "properties": order, "maximum": float("nan")},
             "not JSON compliant"),
            ({"type": "object", "properties": order, "required": 3}, "3 is not of type")):
        with pytest.raises(ValueError, match=f"tool t: inputSchema is not a schema the kernel "
                                             f"can check: .*{why}"):
            served_tools([listed("t", schema=schema)], never)
    assert schema_problem({"$schema": "https://example.invalid/draft"}, {}) == (
        "its inputSchema names a draft jsonschema lacks")


def test_a_server_sees_no_secrets_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYMENTS_API_KEY", "sk-not-for-servers")
    with mcp_tools(fake("environment")) as tools:
        seen = tools["lookup_order"].handler(order_id="A-17")
    assert "PATH" in seen and "PAYMENTS_API_KEY" not in seen


def test_a_server_cannot_borrow_the_model() -> None:
    with mcp_tools(fake("sampling"), timeout=5) as tools:
        said = tools["lookup_order"].handler(order_id="A-17")
    assert said["error"]["message"] == "Sampling not supported"
    assert "result" not in said


def test_a_deeply_nested_result_stays_text() -> None:
    deep = "[" * 900 + "]" * 900
    result = mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=deep)])
    assert result_content(result) == deep
    with mcp_tools(fake("nested")) as tools:
        seen = execute_call(ToolCall("c", "lookup_order", {"order_id": "A-17"}), tools,
                            allow_all)
    assert (seen.kind, seen.content) == ("result", deep)


def test_results_of_other_kinds_are_named_not_read() -> None:
    image = mcp_types.ImageContent(type="image", data="AAAA", mime_type="image/png")
    text = mcp_types.TextContent(type="text", text='{"a": 1}')
    assert result_content(mcp_types.CallToolResult(content=[text])) == {"a": 1}
    assert result_content(mcp_types.CallToolResult(content=[image, text])) == (
        '(image content, not read)\n{"a": 1}')
    assert result_content(mcp_types.CallToolResult(content=[])) == ""


# ---------------------------------------------------------------------------------------------
# Servers that break, stall or lie


def test_a_server_that_breaks_mid_call_is_an_error_observation() -> None:
    with mcp_tools(fake("garbage"), timeout=5) as tools:  # a bad line, then the answer
        seen = execute_call(ToolCall("c", "lookup_order", {"order_id": "A-17"}), tools,
                            allow_all)
        assert seen.kind == "result"
    with mcp_tools(fake("dies"), timeout=5) as tools:
        model = ScriptedModel(turns=[
            tool_call_message("c1", "lookup_order", {"order_id": "A-17"}),
            tool_call_message("c2", "lookup_order", {"order_id": "A-17"})])
        run = run_agent(TASK, model, tools, allow_all)
    assert run.stop.value == "answered"
    assert [o.kind for o in run.state.observations] == ["error", "error"]
    assert all(o.content.startswith("lookup_order: ") for o in run.state.observations)


def test_a_server_that_never_answers_times_out() -> None:
    started = time.perf_counter()
    with mcp_tools(fake("silent"), timeout=0.5) as tools:
        seen = execute_call(ToolCall("c", "lookup_order", {"order_id": "A-17"}), tools,
                            allow_all)
    assert (seen.kind, seen.content) == (
        "error", "lookup_order: no answer within 0.5 s; the server may still act on it")
    assert time.perf_counter() - started < 10


def test_a_tool_list_that_never_ends_is_refused() -> None:
    with pytest.raises(ConnectionError, match="did not end after 100 pages"):
        with mcp_tools(fake("endless-pages"), timeout=5):
            pass


def test_an_instruction_in_an_error_is_untrusted() -> None:
    desk, effects = make_environment()
    plan = [{"tool": "lookup_order", "arguments": {"order_id": "A-17"}}]
    for distrusted in (False, True):
        with mcp_tools(fake("error-says")) as server:
            policy = ProvenancePolicy([TASK])
            local = policy.wrap(desk, trusted=["lookup_order", "read_policy"])
            server = {"lookup_parcel" if n == "lookup_order" else n: s
                      for n, s in server.items()}
            served = distrust_server(policy, server) if distrusted else policy.wrap(server)
            tools = combine_tools(local, served)
            model = obedient_model([{"tool": "lookup_parcel",
                                     "arguments": {"order_id": "A-17"}}, *plan],
                                   "Done.", find_refund_instruction)
            run_agent(TASK, model, tools, every_gate(refund_gate, policy))
        assert (effects == []) is distrusted, effects
        effects.clear()


# ---------------------------------------------------------------------------------------------
# The server's process: never outlives the block


def test_the_server_never_outlives_the_block() -> None:
    before = set(children())
    with pytest.raises(RuntimeError, match="in the block"):
        with mcp_tools(fake("plain")):
            [server] = set(children()) - before
            raise RuntimeError("in the block")
    assert server not in children()  # stopped and collected: not even a zombie
    with pytest.raises(KeyboardInterrupt):
        with mcp_tools(fake("plain")):
            [server] = set(children()) - before
            raise KeyboardInterrupt
    assert server not in children()


def test_an_interrupt_during_a_call_stops_the_server() -> None:
    before = set(children())
    main_thread = threading.main_thread().ident
    assert main_thread is not None
    with pytest.raises(KeyboardInterrupt):
        with mcp_tools(fake("silent"), timeout=30) as tools:
            [server] = set(children()) - before
            timer = threading.Timer(0.3, signal.pthread_kill, (main_thread, signal.SIGINT))
            timer.start()
            tools["lookup_order"].handler(order_id="A-17")
    timer.join()
    assert server not in children()


def test_the_wire_notes_each_message_as_sent() -> None:
    wire: list[tuple[str, Any]] = []
    with mcp_tools(fake("plain"), wire=wire) as tools:
        tools["lookup_order"].handler(order_id="A-17")
    methods = [(direction, message.get("method")) for direction, message in wire]
    assert methods[:2] == [("->", "server/discover"), ("<-", None)]
    call = next(m for d, m in wire if d == "->" and m.get("method") == "tools/call")
    assert call["params"]["arguments"] == {"order_id": "A-17"}
    assert json.loads(json.dumps(wire)) == [list(entry) for entry in wire]
