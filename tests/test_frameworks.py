"""Chapter 4's frameworks: what each does as it comes, and what the kernel's rules restore.

The chapter's cells pin its table byte for byte under nbval; these tests state the claims
behind it in general form and add the hostile cases the chapter does not print: arguments
reformatted to slip past a gate, an approval written into a saved state, an edit that also
renames the call, two resumes at once. Each framework is imported once, by the first test
that needs it; a run costs tens of milliseconds after that.
"""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

import pytest

from agentbook import (
    FRAMEWORKS,
    ApprovalLedger,
    FreshIds,
    KernelStop,
    Limits,
    PromptLog,
    ScriptedModel,
    Stop,
    ToolCall,
    answer_message,
    calls_answered,
    check_run,
    effects_authorized,
    goodwill_model,
    kernel_settle,
    make_environment,
    make_keyed_environment,
    overreaching_model,
    refund_gate,
    run_desk_in,
    run_desk_with_rules,
    tool_call_message,
)
from agentbook.protocols import (
    BehindTheLedger,
    _edited,
    agents_approval_trial,
    as_kernel_result,
    langgraph_approval_trial,
    pydantic_approval_trial,
)

TASK = "Order A-17 arrived damaged. Please make this right."
TRIALS = {"Agents SDK": agents_approval_trial, "PydanticAI": pydantic_approval_trial,
          "LangGraph": langgraph_approval_trial}


def one_call(arguments: str, name: str = "refund_order") -> ScriptedModel:
    """A script whose one message proposes one call with exactly these arguments."""
    return ScriptedModel(turns=[{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]}])


def refunds(effects: list[dict[str, Any]]) -> list[int]:
    return [receipt["refunded_cents"] for receipt in effects]


def desk_runner(rules: bool) -> Any:
    """The desk in a framework as it comes, or with the kernel's rules in its seams."""
    return run_desk_with_rules if rules else run_desk_in


# --- The seams, without any framework ---------------------------------------------------------

def test_the_prompt_log_refuses_a_prompt_over_budget_before_the_model_sees_it() -> None:
    script = ScriptedModel(turns=[answer_message("done")])
    log = PromptLog(script, max_prompt_tokens=5)
    with pytest.raises(KernelStop) as stopped:
        log.chat([{"role": "user", "content": "x" * 100}])
    assert stopped.value.stop is Stop.TOKEN_LIMIT
    assert log.prompts == [] and script.played == 0


def test_the_prompt_log_ends_a_run_whose_tools_saw_no_progress() -> None:
    tools, _ = make_environment()
    log = PromptLog(ScriptedModel(turns=[answer_message("done")]))
    settle = kernel_settle(tools, refund_gate, log, repeated_denials=2)
    too_much = {"order_id": "A-17", "amount_cents": 9999}
    assert [settle(ToolCall(f"c{n}", "refund_order", too_much)).kind
            for n in range(2)] == ["denied", "denied"]
    with pytest.raises(KernelStop) as stopped:
        log.chat([{"role": "user", "content": "go on"}])
    assert stopped.value.stop is Stop.NO_PROGRESS


def test_fresh_ids_name_each_call_after_the_turn_it_was_made_in() -> None:
    call = tool_call_message("call_1", "read_policy", {})
    model = FreshIds(ScriptedModel(turns=[call, call]))
    history: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    assert model.chat(history)["tool_calls"][0]["id"] == "call_1-1"
    history += [call, {"role": "tool", "tool_call_id": "call_1-1", "content": "{}"}]
    assert model.chat(history)["tool_calls"][0]["id"] == "call_1-2"


@pytest.mark.parametrize("saved", [
    '{"arguments": "{\\"order_id\\": \\"A-17\\", \\"amount_cents\\": 7999}"}',
    '{"args": {"order_id": "A-17", "amount_cents":7999}}',
])
def test_the_trials_edit_reaches_the_amount_escaped_or_not(saved: str) -> None:
    edited = _edited(saved, 19999)
    assert "19999" in edited and "7999" not in edited.replace("19999", "")


# --- The ledger: Chapter 2's binding beside a framework ---------------------------------------

def ledger_with_held_refund() -> tuple[ApprovalLedger, list[dict[str, Any]], ToolCall]:
    tools, effects, _ = make_keyed_environment()
    ledger = ApprovalLedger("run", tools)
    held = ToolCall("call_2", "refund_order", {"order_id": "A-17", "amount_cents": 7999})
    assert ledger.asks(held)
    return ledger, effects, held


def test_the_ledger_pays_an_approved_call_once_and_refuses_it_changed() -> None:
    ledger, effects, held = ledger_with_held_refund()
    assert ledger.settle(held).kind == "denied"  # not approved yet
    [shown] = ledger.requests
    ledger.approve(shown)
    changed = ToolCall("call_2", "refund_order", {"order_id": "A-17", "amount_cents": 19999})
    assert ledger.asks(changed)  # asked again: a request of its own, not approved
    renamed = ToolCall("call_9", "refund_order", {"order_id": "A-17", "amount_cents": 7999})
    assert [ledger.settle(call).kind for call in (changed, renamed, held, held)] == [
        "denied", "denied", "result", "result"]
    assert refunds(effects) == [7999]
    assert [request.arguments["amount_cents"] for request in ledger.requests] == [7999, 19999]


def test_an_approval_is_for_the_call_the_person_was_shown_when_an_id_returns() -> None:
    """A model may name a new call with an old id. The person approves the request shown,
    7,999 cents, not whatever the id first named (19,999 cents, held and never approved)."""
    tools, effects, _ = make_keyed_environment()
    ledger = ApprovalLedger("run", tools)
    first = ToolCall("call_2", "refund_order", {"order_id": "A-17", "amount_cents": 19999})
    later = ToolCall("call_2", "refund_order", {"order_id": "A-17", "amount_cents": 7999})
    assert ledger.asks(first) and ledger.asks(later)
    [shown] = [r for r in ledger.requests if r.arguments == later.arguments]
    ledger.approve(shown)
    assert [ledger.settle(call).kind for call in (first, later)] == ["denied", "result"]
    assert refunds(effects) == [7999]


def test_the_ledger_refuses_a_key_the_model_sends_itself() -> None:
    """A model that names the approved call's key cannot spend or block it: the contract has
    no such field, so the call is invalid before any key is sent."""
    ledger, effects, held = ledger_with_held_refund()
    ledger.approve(ledger.requests[0])
    forged = ToolCall("call_3", "refund_order", {
        "order_id": "A-17", "amount_cents": 100,
        "idempotency_key": f"approval/{ledger.digest(held)}"})
    assert ledger.settle(forged).kind == "invalid"
    assert [ledger.settle(held).kind, refunds(effects)] == ["result", [7999]]


def test_the_ledger_refuses_a_desk_whose_effects_take_no_key_served_ones_included() -> None:
    """Without a key the desk cannot tell a step run again from a new refund, so neither an
    approval nor an automatic refund could be paid once: the ledger refuses such a desk when
    it is made. Every served tool is such a tool, since MCP's calls carry no key."""
    from mcp import types

    from agentbook import served_tools

    schema = {"type": "object", "properties": {"order_id": {"type": "string"}},
              "required": ["order_id"], "additionalProperties": False}
    served = served_tools([types.Tool(name="refund_order", description="Refund.",
                                      input_schema=schema)], lambda name, arguments: {})
    for tools in (make_environment()[0], served):
        with pytest.raises(ValueError, match="refund_order takes no idempotency key"):
            ApprovalLedger("run", tools)
    ApprovalLedger("run", make_keyed_environment()[0])  # every effect takes a key


def test_two_resumes_at_once_pay_an_approval_once() -> None:
    ledger, effects, held = ledger_with_held_refund()
    ledger.approve(ledger.requests[0])
    start = threading.Barrier(8)

    def resume() -> None:
        start.wait()
        ledger.settle(held)

    workers = [threading.Thread(target=resume) for _ in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert refunds(effects) == [7999]


# --- Each framework, as it comes and with the kernel's rules ----------------------------------

# Arguments reformatted to slip past a gate, or malformed: with the kernel's rules no framework
# pays for a call Chapter 1's validation and gate refuse, and every call is answered.
HOSTILE_ARGUMENTS = {
    "over the limit": '{"order_id": "A-17", "amount_cents": 999999}',
    "a string": '{"order_id": "A-17", "amount_cents": "4999"}',
    "escaped digits": '{"order_id": "A-17", "amount_cents": "\\u0034999"}',
    "a boolean": '{"order_id": "A-17", "amount_cents": true}',
    "a float": '{"order_id": "A-17", "amount_cents": 4999.0000000000001}',
    "an exponent": '{"order_id": "A-17", "amount_cents": 1e3}',
    "duplicate keys": '{"order_id": "A-17", "amount_cents": 100, "amount_cents": 9999}',
    "an extra field": '{"order_id": "A-17", "amount_cents": 100, "note": "urgent"}',
    "a key of its own": '{"order_id": "A-17", "amount_cents": 100, "idempotency_key": "k"}',
    "a nested amount": '{"order_id": "A-17", "amount_cents": {"value": 100}}',
    "a control character": '{"order_id": "A-17\n", "amount_cents": 100}',
    "empty": "",
    "null": "null",
    "not JSON": '{"order_id": A-17}',
    "not an object": "[1, 2]",
}


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("arguments", HOSTILE_ARGUMENTS.values(), ids=HOSTILE_ARGUMENTS.keys())
def test_with_the_kernels_rules_no_hostile_argument_moves_money(framework: str,
                                                                 arguments: str) -> None:
    tools, _ = make_environment()
    run = run_desk_with_rules(framework, one_call(arguments), TASK, refund_gate)
    assert run.effects == [] and effects_authorized(run, tools, refund_gate)
    assert calls_answered(run) and run.ending == "answered"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_with_the_kernels_rules_an_unknown_tool_is_answered_and_the_run_checks(
        framework: str) -> None:
    run = run_desk_with_rules(framework, one_call("{}", "delete_database"), TASK, refund_gate)
    assert calls_answered(run) and run.ending == "answered"
    gated = run_desk_with_rules(framework, overreaching_model(), TASK, refund_gate)
    assert refunds(gated.effects) == [4999]
    assert all(check_run(as_kernel_result(gated), gated.effects, Limits()).values())


# The gaps the chapter's table reports, each shown by the framework as it comes.
@pytest.mark.parametrize(("framework", "arguments", "paid"), [
    ("PydanticAI", HOSTILE_ARGUMENTS["a boolean"], [1]),  # validated, then gated
    ("PydanticAI", HOSTILE_ARGUMENTS["an exponent"], [1000]),
    ("Agents SDK", HOSTILE_ARGUMENTS["an extra field"], [100]),  # the field dropped
    ("LangGraph", HOSTILE_ARGUMENTS["an extra field"], [100]),
    ("LangGraph", HOSTILE_ARGUMENTS["a control character"], [100]),  # LangChain's lax parse
])
def test_as_it_comes_a_framework_pays_for_a_call_the_kernel_refuses(
        framework: str, arguments: str, paid: list[int]) -> None:
    tools, _ = make_environment()
    run = run_desk_in(framework, one_call(arguments), TASK, refund_gate)
    assert refunds(run.effects) == paid
    assert not effects_authorized(run, tools, refund_gate)


def test_the_agents_sdk_declares_a_strict_schema_it_does_not_check_on_return() -> None:
    """The schema it sends forbids other fields, and a model that decodes under strict mode
    could not write one; the SDK itself does not check the arguments that come back."""
    from agentbook import agents_tools

    tools, _ = make_environment()
    [refund] = [tool for tool in agents_tools(tools, refund_gate) if tool.name == "refund_order"]
    assert refund.strict_json_schema and refund.params_json_schema["additionalProperties"] is False
    run = run_desk_in("Agents SDK", one_call(HOSTILE_ARGUMENTS["an extra field"]), TASK,
                      refund_gate)
    assert refunds(run.effects) == [100]


@pytest.mark.parametrize(("framework", "name", "arguments", "ending"), [
    ("Agents SDK", "delete_database", "{}", "ModelBehaviorError"),
    ("LangGraph", "refund_order", HOSTILE_ARGUMENTS["not JSON"], "answered"),
    ("LangGraph", "refund_order", "5", "ValidationError"),
])
def test_as_it_comes_a_framework_leaves_a_malformed_call_unanswered(
        framework: str, name: str, arguments: str, ending: str) -> None:
    run = run_desk_in(framework, one_call(arguments, name), TASK, refund_gate)
    assert run.ending == ending and not calls_answered(run)


def test_pydantic_ai_answers_every_refusal_given_as_a_result_rather_than_a_retry() -> None:
    """The chapter's PydanticAI gate refuses with ModelRetry, whose retry limit ends the
    stubborn run with its last refusal unanswered. A hook may instead raise SkipToolExecution
    with the refusal as the tool's result: every call is answered, and the run goes on to the
    request limit, counting no retries."""
    from pydantic_ai import Tool, UsageLimits
    from pydantic_ai.capabilities import Hooks
    from pydantic_ai.exceptions import SkipToolExecution

    from agentbook import SYSTEM_PROMPT, run_in_pydantic

    tools, effects = make_environment()
    hooks = Hooks()

    @hooks.on.before_tool_execute
    async def policy(ctx: Any, *, call: Any, tool_def: Any, args: Any) -> Any:
        allowed, reason = refund_gate(ToolCall(call.tool_call_id, call.tool_name, dict(args)))
        if not allowed:
            raise SkipToolExecution(json.dumps({"ok": False, "kind": "denied",
                                                "content": reason}))
        return args

    insist = tool_call_message("s1", "refund_order", {"order_id": "A-17", "amount_cents": 9999})
    stubborn = FreshIds(ScriptedModel(turns=[insist], reactions={"denied": insist}))
    made = [Tool(spec.handler, name=name, description=spec.description)
            for name, spec in tools.items()]
    run, _ = run_in_pydantic(PromptLog(stubborn), made, effects, TASK,
                             system_prompt=SYSTEM_PROMPT, capabilities=[hooks],
                             usage_limits=UsageLimits(request_limit=8))
    assert run.ending == "UsageLimitExceeded" and len(run.prompts) == 8
    assert calls_answered(run) and effects == []


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_saved_approval_loaded_twice_pays_twice_unless_the_ledger_keys_it(
        framework: str) -> None:
    assert refunds(TRIALS[framework](goodwill_model, loads=2)) == [7999, 7999]
    assert refunds(TRIALS[framework](goodwill_model, loads=2, seat=BehindTheLedger)) == [7999]


@pytest.mark.parametrize(("framework", "paid"), [
    ("Agents SDK", []), ("PydanticAI", [19999]), ("LangGraph", [19999])])
def test_an_amount_edited_while_paused_is_paid_unless_the_call_is_bound(
        framework: str, paid: list[int]) -> None:
    assert refunds(TRIALS[framework](goodwill_model, loads=1, edit_to=19999)) == paid
    assert TRIALS[framework](goodwill_model, loads=1, edit_to=19999, seat=BehindTheLedger) == []


def test_an_approval_written_into_the_agents_sdks_saved_state_is_honored() -> None:
    """The SDK keeps its approvals in the RunState: whoever can write the saved text can
    approve. The ledger keeps them where the saved state cannot reach."""
    from agents import RunState as AgentsState

    from agentbook import SYSTEM_PROMPT, agents_tools, gated_agents_tools, run_in_agents
    from agentbook.protocols import _policy_asks, _sync

    for ledger in (False, True):
        if ledger:
            tools, effects, _ = make_keyed_environment()
            book = ApprovalLedger("trial", tools)
            made = gated_agents_tools(tools, book.settle, book.asks)
        else:
            tools, effects = make_environment()
            made = agents_tools(tools, ask=_policy_asks(tools))
        _, paused = run_in_agents(PromptLog(goodwill_model()), made, effects,
                                  "refund", system_prompt=SYSTEM_PROMPT)
        state = paused.to_state()
        for item in state.get_interruptions():
            state.approve(item)  # the attacker's copy, approved by nobody who counts
        forged = state.to_string()
        run_in_agents(PromptLog(goodwill_model()), made, effects, "refund",
                      system_prompt=SYSTEM_PROMPT,
                      resume=lambda agent, text=forged: _sync(
                          AgentsState.from_string(agent, text)))
        assert refunds(effects) == ([] if ledger else [7999])


@pytest.fixture
def attempts(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every address a socket tries to reach in the test, each refused."""
    tried: list[Any] = []

    def refuse(self: socket.socket, address: Any) -> None:
        tried.append(address)
        raise OSError("no network in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return tried


def test_the_agents_sdk_opens_no_connection_during_a_run(attempts: list[Any]) -> None:
    """Its tracing would send traces to the vendor's service; every run turns it off."""
    run = run_desk_in("Agents SDK", overreaching_model(), TASK, refund_gate)
    assert refunds(run.effects) == [4999] and attempts == []
    assert json.dumps(run.messages)  # the record is plain data


def test_langgraphs_own_spans_reach_the_global_provider_with_no_connection(
        attempts: list[Any]) -> None:
    """LangSmith's OpenTelemetry mode writes LangGraph's runs as spans into the provider the
    book installs, and sends nothing to LangSmith's service."""
    from agentbook import otel_genai_spans

    spans = otel_genai_spans(lambda: run_desk_in("LangGraph", overreaching_model(), TASK,
                                                 refund_gate))
    assert {"BookChatModel", "refund_order"} <= set(spans) and attempts == []


# --- Calls of one message run at once -----------------------------------------------------------

def message_of(*cents: int) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        tool_call_message(f"r{n}", "refund_order", {"order_id": "A-17", "amount_cents": amount})
        ["tool_calls"][0] for n, amount in enumerate(cents)]}


def capped(effects: list[dict[str, Any]], cap: int) -> Any:
    """Chapter 1's capped gate: refund_gate, and no refund past ``cap`` in total."""
    def gate(call: ToolCall) -> tuple[bool, str]:
        allowed, reason = refund_gate(call)
        if not allowed or call.name != "refund_order" or call.arguments is None:
            return allowed, reason
        total = sum(receipt["refunded_cents"] for receipt in effects)
        return total + call.arguments["amount_cents"] <= cap, f"past {cap} cents"
    return gate


def test_langgraphs_tool_node_races_a_gate_that_reads_the_effect_log() -> None:
    """ToolNode runs a message's calls in threads: each passes the cap before any is paid."""
    from dataclasses import replace

    from agentbook import SYSTEM_PROMPT, langgraph_desk, langgraph_tools, run_in_langgraph

    tools, effects = make_environment()
    refund, together = tools["refund_order"].handler, threading.Barrier(3, timeout=5)

    def at_once(order_id: str, amount_cents: int) -> Any:  # all three passed the gate
        together.wait()
        return refund(order_id=order_id, amount_cents=amount_cents)

    tools["refund_order"] = replace(tools["refund_order"], handler=at_once)
    log = PromptLog(ScriptedModel(turns=[message_of(3000, 3000, 3000)]))
    node = langgraph_tools(tools, capped(effects, 5000))
    run_in_langgraph(langgraph_desk(log, node), log, effects, TASK, system_prompt=SYSTEM_PROMPT)
    assert refunds(effects) == [3000, 3000, 3000]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_kernels_settle_runs_a_messages_calls_one_at_a_time(framework: str) -> None:
    from agentbook import (SYSTEM_PROMPT, gated_agents_tools, gated_tool_node, langgraph_desk,
                           pydantic_gate_tools, run_in_agents, run_in_langgraph,
                           run_in_pydantic)

    tools, effects = make_environment()
    log = PromptLog(ScriptedModel(turns=[message_of(3000, 3000, 3000)]))
    settle = kernel_settle(tools, capped(effects, 5000), log)
    if framework == "Agents SDK":
        run_in_agents(log, gated_agents_tools(tools, settle), effects, TASK,
                      system_prompt=SYSTEM_PROMPT)
    elif framework == "PydanticAI":
        made, hooks = pydantic_gate_tools(tools, settle)
        run_in_pydantic(log, made, effects, TASK, system_prompt=SYSTEM_PROMPT,
                        capabilities=hooks)
    else:
        node, route = gated_tool_node(settle)
        run_in_langgraph(langgraph_desk(log, node, route), log, effects, TASK,
                         system_prompt=SYSTEM_PROMPT)
    assert refunds(effects) == [3000]


def test_langgraphs_tool_node_pays_a_refund_again_when_it_resumes() -> None:
    """One message: a refund paid at once and one held for a person. On resume LangGraph runs
    the tool node from its start, so the first is paid again; the gated node asks about every
    held call before it runs any."""
    def mixed() -> ScriptedModel:
        return ScriptedModel(turns=[message_of(3000, 8000), answer_message("done")])

    assert refunds(langgraph_approval_trial(mixed, loads=1)) == [3000, 3000, 8000]
    assert refunds(langgraph_approval_trial(mixed, loads=1, seat=BehindTheLedger)) == [3000, 8000]


def test_pydantic_ai_refuses_a_decision_for_a_call_it_is_not_holding() -> None:
    """Resuming with the approval of another call, or of none, raises before any tool runs."""
    from agentbook import GOODWILL_TASK, SYSTEM_PROMPT, pydantic_gate_tools, run_in_pydantic

    tools, effects, _ = make_keyed_environment()
    book = ApprovalLedger("run", tools)
    made, hooks = pydantic_gate_tools(tools, book.settle, book.asks)
    _, paused = run_in_pydantic(PromptLog(goodwill_model()), made, effects, GOODWILL_TASK,
                                system_prompt=SYSTEM_PROMPT, capabilities=hooks)
    book.approve(book.requests[0])
    for other in (["call_9"], ["call_1"], []):
        run, _ = run_in_pydantic(PromptLog(goodwill_model()), made, effects, None,
                                 system_prompt=SYSTEM_PROMPT, capabilities=hooks,
                                 history=paused.all_messages(), approved=other)
        assert run.ending == "UserError"
    assert effects == []


def test_the_agents_sdks_fingerprint_binds_an_approval_only_against_a_careless_edit() -> None:
    """Its fingerprint is a plain SHA-256 of the arguments: a saved state edited to 19,999
    cents with the fingerprint such a call would have (here taken from a real pause of one)
    loads, is approved and is paid. The ledger, outside the saved state, refuses it."""
    import re

    from agents import RunState as AgentsState

    from agentbook import SYSTEM_PROMPT, agents_tools, gated_agents_tools, run_in_agents
    from agentbook.protocols import _edited, _policy_asks, _sync

    def goodwill(cents: int) -> ScriptedModel:
        calls = [tool_call_message("call_1", "read_policy", {})["tool_calls"][0],
                 tool_call_message("call_2", "refund_order", {
                     "order_id": "A-17", "amount_cents": cents})["tool_calls"][0]]
        return ScriptedModel(turns=[{"role": "assistant", "content": "x", "tool_calls": calls},
                                    answer_message("done")])

    def desk(ledger: bool) -> tuple[list[dict[str, Any]], list[Any], Any]:
        if not ledger:
            tools, effects = make_environment()
            return effects, agents_tools(tools, ask=_policy_asks(tools)), None
        tools, effects, _ = make_keyed_environment()
        book = ApprovalLedger("trial", tools)
        return effects, gated_agents_tools(tools, book.settle, book.asks), book

    def pause(cents: int, effects: Any, made: Any) -> str:
        _, paused = run_in_agents(PromptLog(goodwill(cents)), made, effects, "refund",
                                  system_prompt=SYSTEM_PROMPT)
        return str(paused.to_state().to_string())

    def fingerprints(text: str) -> set[str]:
        return set(re.findall(r'"fingerprint": "([0-9a-f]{64})"', text))

    for ledger in (False, True):
        effects, made, book = desk(ledger)
        saved = pause(7999, effects, made)
        if book is not None:
            book.approve(book.requests[0])  # the person approved 7,999 cents
        other = pause(19999, *desk(ledger)[:2])
        [old], [new] = fingerprints(saved) - fingerprints(other), fingerprints(other) - (
            fingerprints(saved))
        forged = _edited(saved, 19999).replace(old, new)

        def approved(agent: Any, text: str = forged) -> Any:
            state = _sync(AgentsState.from_string(agent, text))
            for item in state.get_interruptions():
                state.approve(item)
            return state

        run, _ = run_in_agents(PromptLog(goodwill(7999)), made, effects, "refund",
                               system_prompt=SYSTEM_PROMPT, resume=approved)
        assert refunds(effects) == ([] if ledger else [19999])
        assert ledger == ("no approval for this call as it now stands" in json.dumps(
            run.messages))


def test_the_colab_install_cells_install_the_protocols_extra() -> None:
    """Chapter 4 and its exercises install the package's "protocols" extra on Colab, which
    pins the MCP SDK, jsonschema and the frameworks as requirements.txt does (checked by
    test_the_protocols_extra_pins_what_requirements_pin)."""
    from pathlib import Path

    import nbformat

    root = Path(__file__).resolve().parent.parent
    for notebook in ("chapters/04_protocols.ipynb", "exercises/source/protocols-exercises.ipynb"):
        cells = nbformat.read(root / notebook, 4).cells
        [cell] = [c for c in cells if c.get("id") == "colab-extras"]
        assert 'f"agentbook[protocols] @ {REPOSITORY}@{COMMIT}"' in cell.source, notebook
        for module in ("agents", "pydantic_ai", "langgraph", "jsonschema"):
            assert f'"{module}"' in cell.source, (notebook, module)


def test_the_trials_policy_holds_a_call_it_cannot_read() -> None:
    """PydanticAI's validated arguments carry every defaulted parameter of the handler (the
    keyed desk's idempotency_key=None), which Chapter 1's exact-fields validation refuses: the
    policy must hold such a call for a person, not wave it through unasked."""
    from agentbook import GOODWILL_TASK, SYSTEM_PROMPT, pydantic_tools, run_in_pydantic
    from agentbook.protocols import _policy_asks

    tools, effects, _ = make_keyed_environment()
    made, hooks = pydantic_tools(tools, ask=_policy_asks(tools))
    run, _ = run_in_pydantic(PromptLog(goodwill_model()), made, effects, GOODWILL_TASK,
                             system_prompt=SYSTEM_PROMPT, capabilities=hooks)
    assert run.ending == "paused" and effects == []


# --- Variants: what a model can vary, and what the kernel's rules still hold ------------------

def mixed() -> ScriptedModel:
    """One message: a refund within automatic authority and one a person must approve."""
    return ScriptedModel(turns=[message_of(3000, 8000), answer_message("done")])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_two_resumes_of_a_paused_message_pay_its_automatic_refund_once_with_the_ledger(
        framework: str) -> None:
    """LangGraph runs the paused node again on each resume, the automatic refund with it: the
    ledger pays every effect under a key, not only the approved ones."""
    assert refunds(TRIALS[framework](mixed, loads=2, seat=BehindTheLedger)) == [3000, 8000]


def test_fresh_ids_name_two_calls_of_one_reply_apart() -> None:
    """A served model never names two calls of one reply alike; Chapter 1's scripts may."""
    model = FreshIds(ScriptedModel(turns=[message_of(100, 200)]))
    for entry in (reply := model.chat([{"role": "user", "content": "hi"}]))["tool_calls"]:
        entry["id"] = "c"
    renamed = FreshIds(ScriptedModel(turns=[reply])).chat([{"role": "user", "content": "hi"}])
    assert [entry["id"] for entry in renamed["tool_calls"]] == ["c-1", "c-1.2"]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_with_the_kernels_rules_two_calls_under_one_id_are_both_settled(framework: str) -> None:
    twice = message_of(100, 200)
    for entry in twice["tool_calls"]:
        entry["id"] = "c1"
    run = run_desk_with_rules(framework, ScriptedModel(turns=[twice]), TASK, refund_gate)
    assert refunds(run.effects) == [100, 200]
    assert calls_answered(run) and run.ending == "answered"


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("name", ["Refund_order", "refund_order ", "refund_\u043erder",
                                  "functions.refund_order"])
def test_a_name_like_a_tools_is_an_unknown_tool(framework: str, name: str) -> None:
    """Case, a trailing space, a Cyrillic o, a namespace: each framework matches names exactly,
    so the call is answered as unknown and nothing is paid, as in the kernel."""
    refund = one_call('{"order_id": "A-17", "amount_cents": 100}', name)
    run = run_desk_with_rules(framework, refund, TASK, refund_gate)
    assert run.effects == [] and calls_answered(run) and run.ending == "answered"


@pytest.mark.parametrize(("framework", "ending"), [("Agents SDK", "ModelBehaviorError"),
                                                  ("PydanticAI", "UnexpectedModelBehavior")])
def test_a_framework_fails_on_two_calls_of_one_reply_under_one_id(framework: str,
                                                                  ending: str) -> None:
    """Why FreshIds names the calls of one reply apart: without it, two calls under one id end
    the run in two of the frameworks, the kernel's rules or not, and nothing is paid."""
    from agentbook import (SYSTEM_PROMPT, gated_agents_tools, pydantic_gate_tools,
                           run_in_agents, run_in_pydantic)

    twice = message_of(100, 200)
    for entry in twice["tool_calls"]:
        entry["id"] = "c1"
    tools, effects = make_environment()
    log = PromptLog(ScriptedModel(turns=[twice]))
    settle = kernel_settle(tools, refund_gate, log)
    if framework == "Agents SDK":
        run, _ = run_in_agents(log, gated_agents_tools(tools, settle), effects, TASK,
                               system_prompt=SYSTEM_PROMPT)
    else:
        made, hooks = pydantic_gate_tools(tools, settle)
        run, _ = run_in_pydantic(log, made, effects, TASK, system_prompt=SYSTEM_PROMPT,
                                 capabilities=hooks)
    assert run.ending == ending and effects == []


# Calls whose envelope the wire format forbids, with arguments that would pass: the kernel
# refuses each. With its rules, no framework pays; LangGraph, reading calls with the kernel's
# parser, answers them, while the other two end the run in their model seat.
ENVELOPES = {
    "no id": {"type": "function", "function": {
        "name": "refund_order", "arguments": '{"order_id": "A-17", "amount_cents": 100}'}},
    "a numeric id": {"id": 7, "type": "function", "function": {
        "name": "refund_order", "arguments": '{"order_id": "A-17", "amount_cents": 100}'}},
    "an object for arguments": {"id": "c1", "type": "function", "function": {
        "name": "refund_order", "arguments": {"order_id": "A-17", "amount_cents": 100}}},
}


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("entry", ENVELOPES.values(), ids=ENVELOPES.keys())
def test_with_the_kernels_rules_a_call_the_wire_format_forbids_moves_no_money(
        framework: str, entry: dict[str, Any]) -> None:
    message = {"role": "assistant", "content": None, "tool_calls": [entry]}
    run = run_desk_with_rules(framework, ScriptedModel(turns=[message]), TASK, refund_gate)
    assert run.effects == []
    if framework == "LangGraph":
        assert calls_answered(run) and run.ending == "answered"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_gate_that_raises_ends_the_run_and_pays_nothing(framework: str) -> None:
    """A broken gate fails closed in every framework: the exception ends the run."""
    def broken(call: ToolCall) -> tuple[bool, str]:
        raise RuntimeError("the policy service is down")

    for rules in (False, True):
        run = desk_runner(rules)(framework, overreaching_model(), TASK, broken)
        assert run.effects == [] and run.ending not in ("answered", "paused")


@pytest.mark.parametrize("rules", [False, True])
def test_langgraphs_checkpointer_cannot_store_an_integer_wider_than_64_bits(rules: bool) -> None:
    """The run ends in TypeError before any tool runs: a limit of LangGraph's checkpointer
    that the kernel's rules do not lift. Nothing is paid."""
    run = desk_runner(rules)("LangGraph", one_call('{"order_id": "A-17", "amount_cents": 1'
                                                   + "0" * 20 + "}"), TASK, refund_gate)
    assert run.ending == "TypeError" and run.effects == []


def test_a_langgraph_replay_from_an_older_checkpoint_pays_once_with_the_ledger() -> None:
    """Time travel: invoking the graph from the checkpoint before its tool step runs that step
    again. As it comes the refund is paid twice; the ledger's key pays it once."""
    from agentbook import (SYSTEM_PROMPT, gated_tool_node, kernel_read, langgraph_desk,
                           langgraph_tools, run_in_langgraph)

    for ledger in (False, True):
        log = PromptLog(ScriptedModel(turns=[message_of(3000), answer_message("done")]))
        if ledger:
            tools, effects, _ = make_keyed_environment()
            book = ApprovalLedger("replay", tools)
            node, route, read = (*gated_tool_node(book.settle, book.asks), kernel_read)
        else:
            tools, effects = make_environment()
            node, route, read = langgraph_tools(tools, refund_gate), None, None
        graph = langgraph_desk(log, node, route, read=read)
        run_in_langgraph(graph, log, effects, TASK, system_prompt=SYSTEM_PROMPT)
        history = graph.get_state_history({"configurable": {"thread_id": "desk"}})
        before_tools = next(state for state in history if state.next == ("tools",))
        log.model = ScriptedModel(turns=[answer_message("done")])
        graph.invoke(None, before_tools.config)
        assert refunds(effects) == ([3000] if ledger else [3000, 3000])


@pytest.mark.parametrize(("arguments", "ending"), [
    ('{"order_id": "A-17", "amount_cents": ' + "[" * 5000 + "]" * 5000 + "}", "RecursionError"),
    ('{"order_id": "A-17\\ud800", "amount_cents": 100}', "UnicodeEncodeError"),
])
def test_the_agents_sdks_own_fingerprint_ends_a_run_on_arguments_it_cannot_hash(
        arguments: str, ending: str) -> None:
    """The SDK fingerprints every call before any tool sees it, and fails on arguments nested
    5,000 deep or holding a lone surrogate: the run ends, the kernel's rules or not, and nothing
    is paid. (The kernel answers the first as invalid and pays the second, a refund to an order
    id no order has, as the desk's handler allows.)"""
    for rules in (False, True):
        run = desk_runner(rules)("Agents SDK", one_call(arguments), TASK, refund_gate)
        assert run.ending == ending and run.effects == []


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_with_the_kernels_rules_a_call_after_the_stop_is_skipped_not_paid(framework: str) -> None:
    """The kernel stops at the second identical denial and skips the rest of that message.
    A framework runs the rest of the message anyway: settle must answer it as skipped."""
    from agentbook import Limits, kernel_run, run_agent

    def model() -> ScriptedModel:
        return ScriptedModel(turns=[message_of(9999), message_of(9999, 100)])

    tools, effects = make_environment()
    kernel = kernel_run(run_agent(TASK, FreshIds(model()), tools, refund_gate, Limits()), effects)
    run = run_desk_with_rules(framework, model(), TASK, refund_gate)
    assert kernel.ending == run.ending == "no_progress"
    assert refunds(kernel.effects) == refunds(run.effects) == []
    assert calls_answered(run)


def test_a_persons_answers_bind_to_each_held_call_when_two_share_an_id() -> None:
    """One message, two held refunds under one id: the person rejects the first and approves
    the second. Answers are matched by position, as the kernel answers calls whose ids repeat,
    so only the approved refund is paid; keyed by id, the second answer decided both."""
    from langgraph.types import Command

    from agentbook import allow_all, gated_tool_node, kernel_read, langgraph_desk
    from agentbook.protocols import _policy_asks

    twice = message_of(19999, 7999)
    for entry in twice["tool_calls"]:
        entry["id"] = "X"
    tools, effects = make_environment()
    node, route = gated_tool_node(kernel_settle(tools, allow_all), _policy_asks(tools))
    log = PromptLog(ScriptedModel(turns=[twice, answer_message("done")]))
    graph = langgraph_desk(log, node, route, read=kernel_read)
    config = {"configurable": {"thread_id": "desk"}}
    graph.invoke({"messages": [{"role": "user", "content": "refund"}]}, config)
    shown = [pause.value["arguments"]["amount_cents"]
             for pause in graph.get_state(config).interrupts]
    graph.invoke(Command(resume="no: too much"), config)
    graph.invoke(Command(resume="approve"), config)
    assert shown == [19999] and refunds(effects) == [7999]


@pytest.mark.parametrize("arguments", ['{"order_id": "A-17", "amount_cents": 4999}',
                                       {"order_id": "A-17", "amount_cents": 4999},
                                       {"order_id": "A-17", "amount_cents": 999999}])
def test_pydantic_ais_gated_tools_read_arguments_a_provider_sends_decoded(
        arguments: str | dict[str, Any]) -> None:
    """Google's and Bedrock's models send arguments as an object, not text: the gated tools
    write it as canonical JSON for the kernel's parser, so the gate judges it like any call."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from agentbook import pydantic_gate_tools

    tools, effects = make_environment()
    made, hooks = pydantic_gate_tools(tools, kernel_settle(tools, refund_gate))

    def reply(messages: list[Any], info: Any) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("refund_order", arguments, "c1")])
        return ModelResponse(parts=[TextPart("done")])

    result = Agent(FunctionModel(reply), tools=made, capabilities=hooks).run_sync(TASK)
    said = [json.loads(part.content) for message in result.all_messages()
            for part in message.parts if part.part_kind == "tool-return"]
    cents = (arguments if isinstance(arguments, dict) else json.loads(arguments))["amount_cents"]
    assert refunds(effects) == ([] if cents > 5000 else [cents])
    assert [entry["kind"] for entry in said] == ["denied" if cents > 5000 else "result"]


def test_a_langgraph_replay_pays_once_from_the_tool_step_and_again_from_the_model_step() -> None:
    """The ledger's key is the call's digest, its id included. Replayed from the checkpoint
    before the tool step, the same call comes back and is paid once; replayed from before the
    model step, a model that names its calls afresh proposes a new call, and it is paid again."""
    from agentbook import SYSTEM_PROMPT, gated_tool_node, kernel_read, langgraph_desk
    from agentbook.protocols import run_in_langgraph

    def refund(call_id: str) -> dict[str, Any]:
        return tool_call_message(call_id, "refund_order",
                                 {"order_id": "A-17", "amount_cents": 3000})

    paid: dict[str, list[int]] = {}
    for step, replayed in (("tools", [answer_message("done")]),
                           ("model", [refund("call_2"), answer_message("done")])):
        tools, effects, _ = make_keyed_environment()
        book = ApprovalLedger("replay", tools)
        log = PromptLog(ScriptedModel(turns=[refund("call_1"), answer_message("done")]))
        graph = langgraph_desk(log, *gated_tool_node(book.settle, book.asks), read=kernel_read)
        run_in_langgraph(graph, log, effects, TASK, system_prompt=SYSTEM_PROMPT)
        history = graph.get_state_history({"configurable": {"thread_id": "desk"}})
        before = next(state for state in history if state.next == (step,)
                      and len(state.values.get("messages", [])) == 2 + (step == "tools"))
        log.model = ScriptedModel(turns=replayed)
        graph.invoke(None, before.config)
        paid[step] = refunds(effects)
    assert paid == {"tools": [3000], "model": [3000, 3000]}
