"""The kernel keeps its promises against odd models, forged records and odd replies.

Each test names the promise it holds the kernel to: a failed model call keeps
its run, the model cannot touch the record, a reply JSON cannot carry moves no
money, a forged or edited record is flagged, and a finished run stays finished.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from typing import Any

import jsonschema
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from agentbook import (
    JSON_TYPE_NAMES,
    Limits,
    Meter,
    Observation,
    RunResult,
    RunState,
    ScriptedModel,
    Stop,
    ToolCall,
    ToolSpec,
    anatomy,
    answer_message,
    check_run,
    estimate_tokens,
    execute_plan,
    make_environment,
    map_calls,
    overreaching_model,
    parse_tool_calls,
    print_transcript,
    refund_gate,
    resume_agent,
    run_agent,
    run_chain,
    run_evaluator,
    run_parallel,
    run_router,
    state_from_json,
    state_to_json,
    tool_call_message,
    validate_call,
)
from agentbook.anatomy import _tool_message


TASK = "Order A-17 arrived damaged. Please make this right."
RECEIPT = {"order_id": "A-17", "refunded_cents": 4999}


class FailsOnce:
    """Wraps a model; its call number ``fail_at`` raises, the others pass on."""

    def __init__(self, model: Any, fail_at: int) -> None:
        self.model, self.fail_at, self.calls = model, fail_at, 0

    def chat(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls += 1
        if self.calls == self.fail_at:
            raise ConnectionError("503 Service Unavailable")
        return self.model.chat(messages)


# ------------------------------------------- a failed model call keeps its run


@pytest.mark.parametrize("fail_at", [1, 2, 3, 4])
def test_a_failed_model_call_keeps_its_run_and_a_resume_finishes_it(fail_at):
    tools, effects = make_environment()
    with pytest.raises(ConnectionError) as raised:
        run_agent(TASK, FailsOnce(overreaching_model(), fail_at), tools, refund_gate)
    state = raised.value.state
    # The failed turn left no trace, and every earlier call has its answer.
    assert state.turns == fail_at - 1 == len(state.prompt_token_log)
    assert state_from_json(state_to_json(state)) == state
    effects_before = list(effects)
    resumed = resume_agent(state, overreaching_model(), tools, refund_gate, Limits())
    tools_once, effects_once = make_environment()
    once = run_agent(TASK, overreaching_model(), tools_once, refund_gate)
    assert (resumed.stop, resumed.state) == (once.stop, once.state)
    assert effects == effects_once == [RECEIPT]
    assert effects_before in ([], [RECEIPT])  # the resume repeated no effect
    assert all(check_run(resumed, effects, Limits()).values())


def test_a_model_failure_during_a_resume_carries_the_resumed_state():
    tools, effects = make_environment()
    first = run_agent(TASK, overreaching_model(), tools, refund_gate, Limits(max_turns=2))
    with pytest.raises(ConnectionError) as raised:
        resume_agent(first.state, FailsOnce(overreaching_model(), 1), tools, refund_gate)
    assert raised.value.state is first.state
    assert first.state.turns == 2
    done = resume_agent(raised.value.state, overreaching_model(), tools, refund_gate)
    assert (done.stop, done.state.turns, effects) == (Stop.ANSWERED, 4, [RECEIPT])


# ----------------------------------------------------------- shared runs


def one_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return tool_call_message(call_id, name, arguments)["tool_calls"][0]


def message_of(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


PAID = {"order_id": "A-17", "amount_cents": 4999}
TOO_MUCH = {"order_id": "A-17", "amount_cents": 9999}
LOOKUP = {"order_id": "A-17"}


def gated_run() -> tuple[RunResult, list[dict[str, Any]]]:
    tools, effects = make_environment()
    return run_agent(TASK, overreaching_model(), tools, refund_gate), effects


def fails(report: dict[str, bool]) -> list[str]:
    return [name for name, held in report.items() if not held]


# ------------------------------------------- 1. check_run reads the record


def test_a_second_identical_receipt_needs_an_authorization_of_its_own():
    result, effects = gated_run()
    assert fails(check_run(result, effects, Limits())) == []
    assert fails(check_run(result, effects + [dict(RECEIPT)], Limits())) == [
        "effects_authorized"]


def test_observations_and_receipts_share_nothing_with_the_desk():
    result, effects = gated_run()
    receipt = result.state.observations[-1].content
    assert receipt == effects[0] and receipt is not effects[0]
    effects[0]["refunded_cents"] = 14999  # an edit to the log...
    assert result.state.observations[-1].content == RECEIPT  # ...stays there
    assert fails(check_run(result, effects, Limits())) == ["effects_authorized"]
    order = result.state.observations[0].content
    order["paid_cents"] = 1  # and the desk's order is not the lookup's copy
    tools, _ = make_environment()
    assert tools["lookup_order"].handler(order_id="A-17")["paid_cents"] == 4999


def test_an_edited_observation_no_longer_matches_its_receipt_or_tool_message():
    result, effects = gated_run()
    edited = replace(result.state.observations[-1],
                     content={"order_id": "A-17", "refunded_cents": 14999})
    forged = replace(result, state=replace(
        result.state, observations=[*result.state.observations[:-1], edited]))
    assert set(fails(check_run(forged, effects, Limits()))) == {
        "effects_authorized", "observations_correlated"}


def test_an_orphan_observation_is_no_authority():
    tools, effects = make_environment()
    liar = ScriptedModel(turns=[answer_message("Refunded.")])
    result = run_agent(TASK, liar, tools, refund_gate)
    effects.append(dict(RECEIPT))  # money moved outside the loop
    orphan = Observation("nobody", True, "denied", dict(RECEIPT))
    state = replace(result.state, observations=[orphan])
    assert set(fails(check_run(replace(result, state=state), effects, Limits()))) == {
        "effects_authorized", "observations_correlated"}
    state.messages.insert(-1, _tool_message(orphan))  # with its tool message too
    assert "observations_correlated" in fails(
        check_run(replace(result, state=state), effects, Limits()))


def test_bounded_counts_the_model_calls_in_the_transcript_not_the_counter():
    tools, effects = make_environment()
    lookup = tool_call_message("w", "lookup_order", LOOKUP)
    wanderer = ScriptedModel(turns=[lookup], reactions={"order_id": lookup})
    result = run_agent(TASK, wanderer, tools, refund_gate, Limits(max_turns=20))
    assert result.state.turns == 20
    for forged in (replace(result.state, turns=1),
                   replace(result.state, turns=1, prompt_token_log=[54])):
        report = check_run(replace(result, state=forged), effects, Limits())
        assert "bounded" in fails(report)
    small = replace(result.state, prompt_token_log=[0] * 20)
    assert "bounded" in fails(check_run(replace(result, state=small), effects,
                                        Limits(max_turns=20)))


def test_counts_and_flags_of_another_json_type_are_forgeries_too():
    """2.0 and True equal 2 and 1 in Python, but a record the loop wrote
    holds an int and a bool: a float count or an ok of 1 is flagged."""
    result, effects = gated_run()
    state = result.state
    floats = replace(state, turns=float(state.turns),
                     prompt_token_log=[float(n) for n in state.prompt_token_log])
    assert fails(check_run(replace(result, state=floats), effects, Limits())) == [
        "bounded"]
    paid = state.observations[-1]
    one = replace(paid, ok=1)  # with its tool message forged to match
    messages = [_tool_message(one) if m == _tool_message(paid) else m
                for m in state.messages]
    forged = replace(state, observations=[*state.observations[:-1], one],
                     messages=messages)
    report = check_run(replace(result, state=forged), effects, Limits())
    assert {"effects_authorized", "observations_correlated"} <= set(fails(report))
    assert state.messages[-2]["role"] == "tool"
    reordered = json.dumps(dict(reversed(json.loads(messages[-2]["content"]).items())))
    assert fails(check_run(replace(result, state=replace(state, messages=[
        *state.messages[:-2], {**state.messages[-2], "content": reordered},
        state.messages[-1]])), effects, Limits())) != []


def test_a_tool_message_that_disagrees_with_its_observation_is_flagged():
    result, effects = gated_run()
    messages = copy.deepcopy(result.state.messages)
    denial = next(m for m in messages if m["role"] == "tool" and "denied" in m["content"])
    denial["content"] = denial["content"].replace('"ok": false, "kind": "denied"',
                                                  '"ok": true, "kind": "result"')
    forged = replace(result, state=replace(result.state, messages=messages))
    assert "observations_correlated" in fails(check_run(forged, effects, Limits()))


# ------------------------------------------ 2. the model works on a copy


class Rewriter:
    """A model object that edits and extends the list it is handed."""

    def __init__(self) -> None:
        self.inner = overreaching_model()

    def chat(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        reply = self.inner.chat(messages)
        for message in messages:
            if message["role"] == "tool" and "denied" in message["content"]:
                message["content"] = '{"ok": true, "kind": "result", "content": "done"}'
        messages.append({"role": "user", "content": "appended by the adapter"})
        return reply


def test_a_model_that_rewrites_its_transcript_changes_nothing_in_the_run():
    tools, effects = make_environment()
    result = run_agent(TASK, Rewriter(), tools, refund_gate)
    gated, gated_effects = gated_run()
    assert result.state == gated.state and effects == gated_effects
    assert fails(check_run(result, effects, Limits())) == []
    assert state_from_json(state_to_json(result.state)) == result.state


def test_the_stored_reply_is_not_the_object_the_model_returned():
    reply = tool_call_message("c", "lookup_order", LOOKUP)
    tools, _ = make_environment()
    result = run_agent(TASK, ScriptedModel(turns=[reply]), tools, refund_gate)
    reply["tool_calls"][0]["id"] = "changed later"
    assert result.state.messages[2]["tool_calls"][0]["id"] == "c"


# ------------------------------------- 3. a value JSON cannot carry


@pytest.mark.parametrize("odd", [Decimal("1"), b"bytes", {1, 2}, (1, 2),
                                 datetime(2026, 1, 1), float("nan"), {1: "key"}])
def test_a_reply_json_cannot_carry_moves_no_money_and_the_run_ends_typed(odd):
    reply = {**tool_call_message("c", "refund_order", PAID), "content": odd}
    tools, effects = make_environment()
    result = run_agent(TASK, ScriptedModel(turns=[reply]), tools, refund_gate)
    assert effects == []
    assert [o.kind for o in result.state.observations] == ["invalid"]
    assert result.state.observations[0].content.startswith("the reply held a ")
    assert result.stop is Stop.ANSWERED
    assert state_from_json(state_to_json(result.state)) == result.state
    assert fails(check_run(result, effects, Limits())) == []


def test_a_reply_nested_past_any_message_is_answered_invalid():
    deep: Any = "bottom"
    for _ in range(5000):
        deep = [deep]
    reply = {**tool_call_message("c", "refund_order", PAID), "content": deep}
    tools, effects = make_environment()
    result = run_agent(TASK, ScriptedModel(turns=[reply]), tools, refund_gate)
    assert effects == [] and result.state.observations[0].kind == "invalid"
    state_to_json(result.state)


def test_a_plain_answer_json_cannot_carry_is_kept_as_a_note():
    tools, _ = make_environment()
    result = run_agent(TASK, ScriptedModel(turns=[{"content": Decimal("2")}]), tools,
                       refund_gate)
    assert (result.stop, result.answer) == (Stop.ANSWERED, "(not JSON: Decimal)")


# ------------------------------------------ 4. resume checks the state


def test_resuming_a_state_with_an_unanswered_call_is_refused():
    tools, effects = make_environment()

    def broken(order_id: str) -> dict[str, Any]:
        raise RuntimeError("a bug in a handler")

    tools["lookup_order"] = replace(tools["lookup_order"], handler=broken)
    model = ScriptedModel(turns=[message_of(one_call("a", "lookup_order", LOOKUP),
                                            one_call("b", "refund_order", PAID))])
    state = RunState([{"role": "user", "content": TASK}])
    with pytest.raises(RuntimeError):
        resume_agent(state, model, tools, refund_gate)  # extends the caller's state
    assert state.turns == 1 and state.observations == []  # call "a" has no answer
    with pytest.raises(ValueError, match="do not pair up"):
        resume_agent(state, overreaching_model(), tools, refund_gate)
    assert effects == [] and state.turns == 1


# ----------------------------------------------- 5. the patterns


ODD_REPLIES = ["a plain string", None, {"role": "assistant"}, {"content": None},
               {"content": 42}, {"content": ""}]


@pytest.mark.parametrize("odd", ODD_REPLIES)
@pytest.mark.parametrize("pattern", [run_chain, run_parallel, run_evaluator])
def test_a_pattern_answers_an_odd_reply_in_words_after_one_correct_refund(pattern, odd):
    class Odd:
        def chat(self, messages):
            return odd

    tools, effects = make_environment()
    reply = pattern(Odd(), tools, refund_gate, Meter())
    assert isinstance(reply, str)
    assert effects == [RECEIPT]


@pytest.mark.parametrize("odd", ODD_REPLIES)
def test_the_chain_names_the_receipt_when_no_draft_came_back(odd):
    class Odd:
        def chat(self, messages):
            return odd

    tools, _ = make_environment()
    assert run_chain(Odd(), tools, refund_gate, Meter()) == (
        'Refunded; the model sent no draft: {"order_id": "A-17", "refunded_cents": 4999}')


@pytest.mark.parametrize("draft, accepted", [
    ("We refunded 14999 cents.", False), ("We refunded 49990 cents.", False),
    ("We refunded 4999.50 dollars.", False), ("Order A-17: 17 cents.", False),
    ("We refunded 4999 cents.", True), ("We refunded 4,999 cents.", True),
    ("4999 cents are on their way", True)])
def test_the_evaluator_accepts_only_the_exact_amount(draft, accepted):
    tools, _ = make_environment()
    model = ScriptedModel(turns=[answer_message(draft), answer_message("fallback")])
    meter = Meter()
    final = run_evaluator(model, tools, refund_gate, meter, max_rounds=2)
    assert (final == draft, meter.model_calls) == ((True, 1) if accepted else (False, 2))


@pytest.mark.parametrize("route", ["", None, "Policy", " policy ", "refund it",
                                   "billing please", 7])
def test_only_a_billing_route_moves_money(route):
    tools, effects = make_environment()
    model = ScriptedModel(turns=[{"role": "assistant", "content": route},
                                 answer_message("We refunded 4999 cents.")])
    reply = run_router(TASK, model, tools, refund_gate, Meter())
    assert effects == []
    policy = isinstance(route, str) and route.strip().lower() == "policy"
    assert reply.startswith("Our policy:" if policy else "Not routed, nothing done")


# ---------------------------------- 6. denials are paired by id, not place


def test_answers_saved_in_another_order_count_their_denials_against_the_right_call():
    message = message_of(one_call("r", "refund_order", TOO_MUCH),
                         one_call("l", "lookup_order", LOOKUP))
    again = message_of(one_call("r2", "refund_order", TOO_MUCH))

    def model() -> ScriptedModel:
        return ScriptedModel(turns=[message, again, answer_message("done")])

    tools, _ = make_environment()
    once = run_agent(TASK, model(), tools, refund_gate)
    assert once.stop is Stop.NO_PROGRESS
    tools, _ = make_environment()
    first = run_agent(TASK, model(), tools, refund_gate, Limits(max_turns=1))
    saved = json.loads(state_to_json(first.state))
    saved["messages"][3], saved["messages"][4] = saved["messages"][4], saved["messages"][3]
    saved["observations"].reverse()  # a harness that ran them the other way round
    state = state_from_json(json.dumps(saved))
    assert fails(check_run(RunResult(Stop.STEP_LIMIT, None, state), [], Limits())) == []
    resumed = resume_agent(state, model(), tools, refund_gate)
    assert (resumed.stop, resumed.state.turns) == (once.stop, once.state.turns)


# ------------------------------------------- 7. a finished run stays finished


class Silent:
    def chat(self, messages):
        raise AssertionError("a finished run asked the model again")


def test_a_no_progress_run_is_returned_as_it_is_and_saved_with_its_stop():
    insist = tool_call_message("s", "refund_order", TOO_MUCH)
    tools, effects = make_environment()
    done = run_agent(TASK, ScriptedModel(turns=[insist], reactions={"denied": insist}),
                     tools, refund_gate)
    assert done.stop is Stop.NO_PROGRESS is done.state.stop
    loaded = state_from_json(state_to_json(done.state))
    assert loaded.stop is Stop.NO_PROGRESS
    again = resume_agent(loaded, Silent(), tools, refund_gate, Limits(max_turns=50))
    assert (again.stop, again.state) == (Stop.NO_PROGRESS, done.state)
    loaded.messages.append({"role": "user", "content": "Try what was paid."})
    goes_on = resume_agent(loaded, ScriptedModel(turns=[answer_message("ok")]), tools,
                           refund_gate)
    assert goes_on.stop is Stop.ANSWERED and effects == []


@pytest.mark.parametrize("stop", ["finished", 3, ["answered"]])
def test_a_saved_stop_must_be_a_stop(stop):
    result, _ = gated_run()
    saved = json.loads(state_to_json(result.state))
    with pytest.raises(ValueError, match="unknown stop"):
        state_from_json(json.dumps({**saved, "stop": stop}))
    without = {k: v for k, v in saved.items() if k != "stop"}
    with pytest.raises(ValueError, match="exactly the fields"):
        state_from_json(json.dumps(without))


# ---------------------------------------- 8. numbers JSON does not have


@pytest.mark.parametrize("text", ['{"order_id": "A-17", "amount_cents": NaN}',
                                  '{"order_id": "A-17", "amount_cents": Infinity}',
                                  '{"order_id": "A-17", "amount_cents": -Infinity}',
                                  '{"order_id": "A-17", "amount_cents": 1e999}'])
def test_the_parser_refuses_numbers_json_does_not_have(text):
    entry = {"id": "n", "type": "function",
             "function": {"name": "refund_order", "arguments": text}}
    [call] = parse_tool_calls({"role": "assistant", "tool_calls": [entry]})
    assert (call.arguments, call.problem) == (None, "arguments were not valid JSON")


def test_a_saved_state_holding_nan_is_refused():
    result, _ = gated_run()
    text = state_to_json(result.state).replace('"content": null', '"content": NaN', 1)
    with pytest.raises(ValueError, match="not valid JSON"):
        state_from_json(text)


def test_a_whole_float_is_refused_where_an_integer_is_declared():
    tools, effects = make_environment()
    call = ToolCall("f", "refund_order", {"order_id": "A-17", "amount_cents": 4999.0})
    assert validate_call(call, tools) == "amount_cents must be int, got float"
    assert effects == []


# --------------------------------------------------------- 9. small ones


@pytest.mark.parametrize("threads", [True, False])
def test_map_calls_over_nothing_is_nothing(threads, monkeypatch):
    monkeypatch.setattr(anatomy, "THREADS_AVAILABLE", threads)
    assert map_calls(str, []) == []
    assert map_calls(str, [1, 2]) == ["1", "2"]


def test_a_saved_state_nested_too_deeply_is_refused_with_a_value_error():
    result, _ = gated_run()
    saved = json.loads(state_to_json(result.state))
    saved["observations"][0]["content"] = "[" * 50_000 + "]" * 50_000
    text = json.dumps(saved).replace('"' + "[" * 50_000 + "]" * 50_000 + '"',
                                     "[" * 50_000 + "]" * 50_000)
    with pytest.raises(ValueError):
        state_from_json(text)
    deep = "[" * 900 + "]" * 900  # within json's reach, past Python's stack for dumps
    text = json.dumps(saved).replace('"' + "[" * 50_000 + "]" * 50_000 + '"', deep)
    with pytest.raises(ValueError):
        state_from_json(text)


def test_a_saved_message_nested_past_any_reply_is_refused_before_the_model_is_asked():
    """Within json's reach (400 levels) but past what the loop lets a reply
    hold: refused on loading, not a RecursionError when the model is asked."""
    tools, effects = make_environment()
    result = run_agent(TASK, ScriptedModel(turns=[answer_message("Hello.")]), tools,
                       refund_gate)
    saved = json.loads(state_to_json(result.state))
    deep = "[" * 400 + "]" * 400
    saved["messages"][-1]["content"] = "DEEP"
    with pytest.raises(ValueError, match="nested deeper"):
        state_from_json(json.dumps(saved).replace('"DEEP"', deep))
    saved["messages"][-1]["content"] = json.loads("[" * 60 + "]" * 60)  # a reply may
    assert state_from_json(json.dumps(saved)).messages[-1] == saved["messages"][-1]


def test_print_transcript_prints_a_lone_surrogate_escaped(capsys):
    state = RunState([{"role": "user", "content": "caf\udce9"}])
    print_transcript(state)
    assert capsys.readouterr().out == "user   | caf\\udce9\n"


@pytest.mark.parametrize("plan", [None, "a plan", {"tool": "read_policy", "arguments": {}}, 5])
def test_a_plan_that_is_no_list_is_one_invalid_step(plan):
    tools, effects = make_environment()
    observations, failed_at = execute_plan(plan, tools, refund_gate)
    assert ([o.kind for o in observations], failed_at) == (["invalid"], 0)
    assert observations[0].content == "a plan must be a list of steps"


def test_a_plan_made_by_a_generator_runs_like_a_list():
    tools, effects = make_environment()
    steps = ({"tool": name, "arguments": arguments}
             for name, arguments in [("lookup_order", LOOKUP), ("refund_order", PAID)])
    observations, done = execute_plan(steps, tools, refund_gate)
    assert (done, [o.kind for o in observations], effects) == (2, ["result"] * 2, [RECEIPT])


@pytest.mark.parametrize("fields", [{"max_turns": -1}, {"max_prompt_tokens": -5},
                                    {"repeated_denials": 0}, {"max_turns": 2.5},
                                    {"max_turns": True}])
def test_limits_refuse_ceilings_that_mean_nothing(fields):
    with pytest.raises(ValueError, match="must be a whole number"):
        Limits(**fields)


# ------------------------------------- forged records, made by Hypothesis


def base_runs() -> list[tuple[RunResult, list[dict[str, Any]]]]:
    """Honest runs of every shape: answers, denials, skips, two receipts."""
    scripts = [
        overreaching_model(),
        ScriptedModel(turns=[message_of(one_call("m1", "refund_order", TOO_MUCH),
                                        one_call("m2", "refund_order", TOO_MUCH),
                                        one_call("m3", "lookup_order", LOOKUP))]),
        ScriptedModel(turns=[message_of(one_call("p1", "lookup_order", LOOKUP),
                                        one_call("p2", "read_policy", {})),
                             message_of(one_call("r1", "refund_order", PAID),
                                        one_call("r2", "refund_order", PAID))]),
        ScriptedModel(turns=[message_of(one_call("x", "refund_order", PAID),
                                        one_call("x", "lookup_order", LOOKUP))]),
    ]
    runs = []
    for script in scripts:
        tools, effects = make_environment()
        runs.append((run_agent(TASK, script, tools, refund_gate), effects))
    return runs


BASE_RUNS = base_runs()
FORGERIES = ["duplicate receipt", "edited receipt", "edited observation",
             "edited tool message", "orphan", "orphan answered", "answer moved earlier",
             "answer moved later", "answer dropped", "token log", "turns", "stop"]


def forge(kind: str, result: RunResult, effects: list[dict[str, Any]],
          data: st.DataObject) -> tuple[RunResult, list[dict[str, Any]]]:
    """One forged copy of an honest run and its effect log."""
    state = copy.deepcopy(result.state)
    effects = copy.deepcopy(effects)
    tools_at = [n for n, m in enumerate(state.messages) if m["role"] == "tool"]
    spoken = [n for n, m in enumerate(state.messages) if m["role"] == "assistant"]
    pick = data.draw(st.integers(0, 10_000))
    delta = data.draw(st.integers(-10_000, 10_000).filter(bool))
    stop = result.stop
    if kind == "duplicate receipt":
        effects.append(copy.deepcopy(effects[pick % len(effects)]))
    elif kind == "edited receipt":
        effects[pick % len(effects)]["refunded_cents"] += delta
    elif kind == "edited observation":
        index = pick % len(state.observations)
        old = state.observations[index]
        new = data.draw(st.one_of(st.none(), st.integers(), st.text("abc x", max_size=5),
                                  st.just(RECEIPT)).filter(lambda new: new != old.content))
        state.observations[index] = replace(old, content=new)
    elif kind == "edited tool message":
        state.messages[tools_at[pick % len(tools_at)]]["content"] += " "
    elif kind.startswith("orphan"):
        orphan = Observation("forged-id", data.draw(st.booleans()),
                             data.draw(st.sampled_from(["result", "denied", "skipped"])),
                             copy.deepcopy(RECEIPT))
        state.observations.insert(pick % (len(state.observations) + 1), orphan)
        if kind == "orphan answered":
            state.messages.insert(1 + pick % len(state.messages), _tool_message(orphan))
    elif kind == "answer moved earlier":
        message = state.messages.pop(tools_at[pick % len(tools_at)])
        before = max(n for n in spoken if n < tools_at[pick % len(tools_at)])
        state.messages.insert(data.draw(st.integers(0, before)), message)
    elif kind == "answer moved later":
        later = [n for n in tools_at if any(s > n for s in spoken)]
        if not later:  # no assistant message after any answer: add one
            state.messages.append(answer_message("and then"))
            later = tools_at
        source = later[pick % len(later)]
        after = min([s for s in spoken if s > source] or [len(state.messages) - 1])
        state.messages.insert(data.draw(st.integers(after, len(state.messages) - 1)),
                              state.messages.pop(source))
    elif kind == "answer dropped":
        index = tools_at[pick % len(tools_at)]
        dropped = state.messages.pop(index)
        state.observations = [o for o in state.observations
                              if _tool_message(o) != dropped]
    elif kind == "token log":
        state.prompt_token_log[pick % len(state.prompt_token_log)] += delta
    elif kind == "turns":
        state.turns = max(0, state.turns + delta)
    elif kind == "stop":
        stop = data.draw(st.sampled_from([s for s in Stop if s != result.stop]))
    return RunResult(stop, result.answer, state), effects


@pytest.mark.parametrize("kind", FORGERIES)
@settings(max_examples=6, deadline=None)
@given(which=st.sampled_from(range(len(BASE_RUNS))), data=st.data())
def test_check_run_flags_every_forged_record(kind, which, data):
    result, effects = BASE_RUNS[which]
    assert all(check_run(result, effects, Limits()).values())
    if kind in ("duplicate receipt", "edited receipt") and not effects:
        effects = []  # nothing to forge here: forge the record instead
        kind = "orphan"
    forged, forged_effects = forge(kind, result, effects, data)
    report = check_run(forged, forged_effects, Limits())
    event(kind)
    assert not all(report.values()), (kind, forged.state)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_answers_within_a_message_may_come_in_any_order(data):
    """A harness that ran one message's calls in another order forged nothing."""
    result, effects = BASE_RUNS[2]  # two messages of two calls, distinct ids
    state = copy.deepcopy(result.state)
    for start in (3, 6):  # the two answers of each message, with their observations
        if data.draw(st.booleans()):
            state.messages[start], state.messages[start + 1] = (
                state.messages[start + 1], state.messages[start])
    if data.draw(st.booleans()):
        state.observations.reverse()
    assert all(check_run(RunResult(result.stop, result.answer, state), effects,
                         Limits()).values())


# ------------------------ the validator against JSON Schema, on random values

JSON_SCALARS = (st.none() | st.booleans() | st.integers()
                | st.floats(allow_nan=False, allow_infinity=False)
                | st.integers(-10**6, 10**6).map(float) | st.text("ab1.", max_size=4))
JSON_VALUES = JSON_SCALARS | st.lists(JSON_SCALARS, max_size=2) | st.dictionaries(
    st.text("ab", max_size=2), JSON_SCALARS, max_size=2)


@settings(max_examples=100, deadline=None)
@given(declared=st.sampled_from([str, int, float, bool]), value=JSON_VALUES)
def test_the_validator_accepts_what_json_schema_accepts_but_whole_floats_for_integers(
        declared, value):
    """Stricter in one place only: ``4999.0`` is refused where an integer is declared."""
    spec = ToolSpec("probe", {"x": declared}, lambda x: x)
    ours = validate_call(ToolCall("v", "probe", {"x": value}), {"probe": spec}) is None
    schema = {"type": JSON_TYPE_NAMES[declared]}
    theirs = jsonschema.Draft202012Validator(schema).is_valid(value)
    whole_float = type(value) is float and value.is_integer()
    event(f"{declared.__name__}: ours={ours} theirs={theirs}")
    assert ours == (theirs and not (declared is int and whole_float))
    # what the parser can deliver at all is JSON, so the comparison is fair
    assert json.loads(json.dumps({"x": value})) == {"x": value}


def test_check_run_and_the_token_estimate_never_raise_on_a_value_json_lacks():
    result, effects = gated_run()
    state = copy.deepcopy(result.state)
    state.messages[1]["content"] = Decimal("1")
    assert estimate_tokens(state.messages) > 0
    report = check_run(replace(result, state=state), effects, Limits())
    assert report["bounded"] is False  # the transcript no longer prices as logged


def test_an_integer_too_long_for_json_text_is_answered_invalid():
    reply = {**tool_call_message("c", "refund_order", PAID), "content": 10**5000}
    tools, effects = make_environment()
    result = run_agent(TASK, ScriptedModel(turns=[reply]), tools, refund_gate)
    assert effects == []
    assert result.state.observations[0].content == "the reply held a value of type int"
    state_to_json(result.state)


def test_answers_to_calls_sharing_an_id_may_trade_places_without_a_verdict_changing():
    """With one id for two calls, the record cannot say which answer is whose."""
    message = message_of(one_call("p", "lookup_order", LOOKUP),
                         one_call("p", "read_policy", {}))
    tools, effects = make_environment()
    result = run_agent(TASK, ScriptedModel(turns=[message]), tools, refund_gate)
    swapped = copy.deepcopy(result.state)
    swapped.messages[3], swapped.messages[4] = swapped.messages[4], swapped.messages[3]
    assert check_run(replace(result, state=swapped), effects, Limits()) == check_run(
        result, effects, Limits())


# --------------------- replies with Python values JSON cannot carry, at random

ODD_VALUES = st.sampled_from([Decimal("1"), b"x", (1,), frozenset({1}), float("nan"),
                              float("inf"), 10**5000, datetime(2026, 1, 1), {1: 2}])
PLAIN_VALUES = st.none() | st.booleans() | st.integers(-5, 5) | st.text("ab", max_size=3)


def sprinkled(value: Any, odd: Any, where: int) -> tuple[Any, int]:
    """``value`` with ``odd`` put in place of its leaf number ``where``, if it has one."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out[key], where = sprinkled(item, odd, where)
        return out, where
    if isinstance(value, list):
        items = []
        for item in value:
            replaced, where = sprinkled(item, odd, where)
            items.append(replaced)
        return items, where
    return (odd, -1) if where == 0 else (value, where - 1)


@settings(max_examples=80, deadline=None)
@given(amounts=st.lists(st.sampled_from([100, 4999, 9999]), min_size=1, max_size=3),
       odd=ODD_VALUES, where=st.integers(0, 30), thought=PLAIN_VALUES)
def test_a_value_json_cannot_carry_anywhere_in_a_reply_moves_no_money(
        amounts, odd, where, thought):
    calls = [one_call(f"c{n}", "refund_order", {"order_id": "A-17", "amount_cents": a})
             for n, a in enumerate(amounts)]
    reply, left = sprinkled({**message_of(*calls), "content": thought}, odd, where)
    tools, effects = make_environment()
    result = run_agent(TASK, ScriptedModel(turns=[reply]), tools, refund_gate)
    if left == -1:  # the odd value went in: nothing of this reply ran
        event("odd value placed")
        assert effects == []
        assert {o.kind for o in result.state.observations} <= {"invalid"}
    assert isinstance(result.stop, Stop)
    assert state_from_json(state_to_json(result.state)) == result.state
    assert all(check_run(result, effects, Limits()).values())
