"""Approval as a typed pause: the policy, the paused run, its save, and resuming it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentbook import (
    ApprovalPolicy,
    ApprovalRequest,
    Limits,
    PausedRun,
    RunResult,
    ScriptedModel,
    Stop,
    ToolCall,
    ToolSpec,
    answer_message,
    approve,
    call_digest,
    check_run,
    continue_with_approvals,
    deny,
    make_environment,
    keyed_refunds,
    make_keyed_environment,
    overreaching_model,
    paused_from_json,
    resume_with_decisions,
    run_keyed,
    run_with_approvals,
)

from tests.desk_messages import TASK, entry, message, refund


def mixed_model() -> ScriptedModel:
    """One message: a lookup, a refund to approve, an automatic refund, another to approve."""
    return ScriptedModel(turns=[
        message(entry("l", "lookup_order", {"order_id": "A-17"}), refund("big", 7000),
                refund("small", 100), refund("bigger", 15000)),
        answer_message("done")])


def paused_run(model: ScriptedModel | None = None) -> tuple[PausedRun, list[dict[str, Any]],
                                                            dict[str, ToolSpec]]:
    tools, effects, _ = make_keyed_environment()
    paused = run_with_approvals(TASK, model or mixed_model(), tools, ApprovalPolicy())
    assert isinstance(paused, PausedRun)
    return paused, effects, tools


# ----------------------------------------------------------------------- the policy


@pytest.mark.parametrize(("cents", "verdict"), [
    (1, "allow"), (5000, "allow"), (5001, "ask"), (20000, "ask"), (20001, "deny"),
    (0, "deny"), (-3, "deny"), (True, "deny"), (12.5, "deny"), ("100", "deny")])
def test_refunds_are_sorted_by_amount(cents: Any, verdict: str) -> None:
    tools, _ = make_environment()
    call = ToolCall("c", "refund_order", {"order_id": "A-17", "amount_cents": cents})
    assert ApprovalPolicy().classify(call, tools)[0] == verdict


def test_reads_are_allowed_and_other_effects_are_asked_about() -> None:
    tools, _ = make_environment()
    tools["close_account"] = ToolSpec("Close it.", {}, lambda: None, effectful=True)
    policy = ApprovalPolicy()
    assert policy.classify(ToolCall("c", "read_policy", {}), tools)[0] == "allow"
    assert policy.classify(ToolCall("c", "close_account", {}), tools)[0] == "ask"


def test_other_limits_move_the_bands() -> None:
    tools, _ = make_environment()
    call = ToolCall("c", "refund_order", {"order_id": "A-17", "amount_cents": 150})
    assert ApprovalPolicy(100, 200).classify(call, tools)[0] == "ask"
    assert ApprovalPolicy(100, 120).classify(call, tools)[0] == "deny"


@pytest.mark.parametrize(("auto", "approval"), [(-1, 10), (30, 20)])
def test_limits_out_of_order_are_refused(auto: int, approval: int) -> None:
    with pytest.raises(ValueError, match="auto_limit_cents <= approval_limit_cents"):
        ApprovalPolicy(auto, approval)


# ------------------------------------------------------------------- pausing the run


def test_the_run_pauses_with_the_asked_calls_unexecuted_and_the_rest_handled() -> None:
    paused, effects, _ = paused_run()
    assert [r.call_id for r in paused.requests] == ["big", "bigger"]
    assert [None if s is None else s.kind for s in paused.settled] == [
        "result", None, "result", None]
    assert effects == [{"order_id": "A-17", "refunded_cents": 100}]
    assert paused.state.messages[-1]["role"] == "assistant"


def test_a_request_binds_run_call_tool_and_arguments() -> None:
    paused, _, _ = paused_run()
    request = paused.requests[0]
    assert request.digest == call_digest(paused.run_id, "big", "refund_order",
                                         {"amount_cents": 7000, "order_id": "A-17"})
    changed = [call_digest("other", "big", "refund_order", request.arguments),
               call_digest(paused.run_id, "big2", "refund_order", request.arguments),
               call_digest(paused.run_id, "big", "lookup_order", request.arguments),
               call_digest(paused.run_id, "big", "refund_order",
                           {**request.arguments, "amount_cents": 7001})]
    assert request.digest not in changed and len(set(changed)) == 4


def test_runs_of_the_same_task_get_random_run_ids_and_other_digests() -> None:
    first, _, _ = paused_run()
    second, _, tools = paused_run()
    assert first.run_id != second.run_id
    assert first.requests[0].digest != second.requests[0].digest
    third = run_with_approvals(TASK, mixed_model(), tools, ApprovalPolicy(), run_id="mine")
    assert isinstance(third, PausedRun) and third.run_id == "mine"


def test_a_run_with_nothing_to_ask_ends_like_chapter_one() -> None:
    tools, effects = make_environment()
    model = ScriptedModel(turns=[message(refund("c", 4999)), answer_message("done")])
    result = run_with_approvals(TASK, model, tools, ApprovalPolicy())
    assert isinstance(result, RunResult) and result.stop == Stop.ANSWERED
    assert len(effects) == 1 and all(check_run(result, effects, Limits()).values())


def test_a_repeated_refusal_still_stops_the_run_and_skips_the_rest() -> None:
    tools, effects = make_environment()
    model = ScriptedModel(turns=[message(refund("a", 30000), refund("b", 30000),
                                         refund("c", 7000))])
    result = run_with_approvals(TASK, model, tools, ApprovalPolicy())
    assert isinstance(result, RunResult) and result.stop == Stop.NO_PROGRESS
    assert [o.kind for o in result.state.observations] == ["denied", "denied", "skipped"]
    assert effects == [] and all(check_run(result, effects, Limits()).values())


# ------------------------------------------------------------------ saving and loading


def test_a_saved_paused_run_loads_back_equal() -> None:
    paused, _, _ = paused_run()
    assert paused_from_json(paused.to_json()) == paused


def edited(paused: PausedRun, change: Any) -> str:
    data = json.loads(paused.to_json())
    change(data)
    return json.dumps(data)


def set_amount(data: dict[str, Any]) -> None:
    data["requests"][0]["arguments"]["amount_cents"] = 19999


def redo_request(data: dict[str, Any]) -> None:
    set_amount(data)
    request = data["requests"][0]
    request["digest"] = call_digest(data["run_id"], request["call_id"], request["name"],
                                    request["arguments"])


def change_run_id(data: dict[str, Any]) -> None:
    data["run_id"] = "another"


@pytest.mark.parametrize(("change", "reason"), [
    (set_amount, "changed arguments no longer match their digest"),
    (redo_request, "is not the call in the transcript"),
    (change_run_id, "no longer match their digest"),
    (lambda d: d["requests"].pop(), "the requests are not the calls left waiting"),
    (lambda d: d["settled"].pop(), "one settled entry per proposed call"),
    (lambda d: d["settled"].__setitem__(0, None), "the requests are not the calls left"),
    (lambda d: d["state"]["messages"].pop(), "the last message proposes no calls"),
    (lambda d: d["state"].update(turns=5), "turns, token log and assistant messages"),
    (lambda d: d.update(format="v2"), "not a saved paused run"),
    (lambda d: d["settled"][0].update(call_id="x"), "answers another call"),
])
def test_damaged_or_edited_saves_are_refused_with_a_reason(change: Any, reason: str) -> None:
    paused, _, _ = paused_run()
    with pytest.raises(ValueError, match=reason):
        paused_from_json(edited(paused, change))


@pytest.mark.parametrize("text", ["", "[1]", "{", '{"format": 1}', "null"])
def test_text_that_is_no_paused_run_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="paused run"):
        paused_from_json(text)


# -------------------------------------------------------------------- decisions


@pytest.mark.parametrize(("make", "args"), [(approve, ("",)), (approve, (" ",)),
                                            (deny, ("maria", "")), (deny, ("", "why"))])
def test_a_decision_needs_a_reviewer_and_a_denial_a_reason(make: Any, args: Any) -> None:
    request = ApprovalRequest("c", "refund_order", {}, "d")
    with pytest.raises(ValueError, match="non-empty"):
        make(request, *args)


def test_approved_calls_run_once_and_denied_ones_carry_the_reason() -> None:
    paused, effects, tools = paused_run()
    big, bigger = paused.requests
    result = resume_with_decisions(paused, [deny(bigger, "maria", "too much"),
                                            approve(big, "maria")],
                                   mixed_model(), tools, ApprovalPolicy())
    assert isinstance(result, RunResult) and result.stop == Stop.ANSWERED
    assert [e["refunded_cents"] for e in effects] == [100, 7000]
    kinds = [(o.call_id, o.kind) for o in result.state.observations]
    assert kinds == [("l", "result"), ("big", "result"), ("small", "result"),
                     ("bigger", "denied")]
    assert result.state.observations[3].content == "maria denied it: too much"
    assert all(check_run(result, effects, Limits()).values())


def test_a_denied_model_recovers_with_the_amount_paid() -> None:
    paused, effects, tools = paused_run(overreaching_model())
    result = resume_with_decisions(paused, [deny(paused.requests[0], "maria", "pay 4999")],
                                   overreaching_model(), tools, ApprovalPolicy())
    assert isinstance(result, RunResult) and result.stop == Stop.ANSWERED
    assert effects == [{"order_id": "A-17", "refunded_cents": 4999}]


def test_a_loaded_run_resumes_like_the_one_that_was_saved() -> None:
    paused, effects, tools = paused_run()
    loaded = paused_from_json(paused.to_json())
    decisions = [approve(r, "maria") for r in loaded.requests]
    result = resume_with_decisions(loaded, decisions, mixed_model(), tools, ApprovalPolicy())
    assert isinstance(result, RunResult)
    assert [e["refunded_cents"] for e in effects] == [100, 7000, 15000]


def test_a_run_can_pause_again_after_resuming() -> None:
    model = ScriptedModel(turns=[message(refund("a", 6000)), message(refund("b", 7000)),
                                 answer_message("done")])
    paused, effects, tools = paused_run(model)
    again = resume_with_decisions(paused, [approve(paused.requests[0], "m")], model, tools,
                                  ApprovalPolicy())
    assert isinstance(again, PausedRun) and again.requests[0].call_id == "b"
    done = resume_with_decisions(again, [approve(again.requests[0], "m")], model, tools,
                                 ApprovalPolicy())
    assert isinstance(done, RunResult) and len(effects) == 2


def another_runs_decision(paused: PausedRun) -> list[Any]:
    other, _, _ = paused_run()  # the same task and script, another run
    return [approve(other.requests[0], "m"), approve(paused.requests[1], "m")]


@pytest.mark.parametrize(("decide", "reason"), [
    (lambda p: [], "no decision for big, bigger"),
    (lambda p: [approve(p.requests[0], "m")], "no decision for bigger"),
    (lambda p: [approve(p.requests[0], "m")] * 2 + [approve(p.requests[1], "m")],
     "request big is decided twice"),
    (another_runs_decision, "the decision for big matches no request"),
    (lambda p: ["approve everything"], "not a decision"),
])
def test_bad_decisions_are_refused_and_move_no_money(decide: Any, reason: str) -> None:
    paused, effects, tools = paused_run()
    before = (list(effects), json.loads(paused.to_json()))
    with pytest.raises(ValueError, match=reason):
        resume_with_decisions(paused, decide(paused), mixed_model(), tools, ApprovalPolicy())
    assert (effects, json.loads(paused.to_json())) == before


def test_a_paused_run_resumes_only_once() -> None:
    paused, effects, tools = paused_run()
    decisions = [approve(r, "m") for r in paused.requests]
    resume_with_decisions(paused, decisions, mixed_model(), tools, ApprovalPolicy())
    with pytest.raises(ValueError, match="resumed already"):
        resume_with_decisions(paused, decisions, mixed_model(), tools, ApprovalPolicy())
    assert [e["refunded_cents"] for e in effects] == [100, 7000, 15000]


# ------------------------------------------------------- an approval is spent once


def approve_copies(keyed: bool) -> tuple[list[dict[str, Any]], list[Any]]:
    """One save loaded twice, as two workers or a retry would, each copy approved and
    resumed against the keyed desk, with ``run_keyed`` or as allowed; the log, the runs."""
    paused, effects, tools = paused_run(overreaching_model())
    saved = paused.to_json()
    how = {"run_approved": run_keyed} if keyed else {}
    results = []
    for _ in range(2):
        copy = paused_from_json(saved)
        results.append(resume_with_decisions(copy, [approve(copy.requests[0], "maria")],
                                             overreaching_model(), tools, ApprovalPolicy(),
                                             **how))
    return effects, results


def test_without_a_key_one_save_approved_twice_pays_twice() -> None:
    """The attack the key stops: each copy is a correct run, and the desk pays each."""
    effects, results = approve_copies(keyed=False)
    assert effects == [{"order_id": "A-17", "refunded_cents": 9999}] * 2
    assert all(isinstance(r, RunResult) and r.stop == Stop.ANSWERED for r in results)


def test_one_save_loaded_twice_and_approved_twice_pays_once() -> None:
    effects, results = approve_copies(keyed=True)
    assert effects == [{"order_id": "A-17", "refunded_cents": 9999}]
    for result in results:
        assert isinstance(result, RunResult) and result.stop == Stop.ANSWERED
        assert result.state.observations[-1].content == effects[0]


def test_one_save_approved_in_two_threads_at_once_pays_once() -> None:
    """The desk's check and payment are one step: a log slow to append lets
    the second thread reach the check while the first is still paying."""
    import threading
    import time
    from dataclasses import replace

    class SlowLog(list):  # type: ignore[type-arg]
        def append(self, item: Any) -> None:
            time.sleep(0.05)
            super().append(item)

    effects = SlowLog()
    paused, _, tools = paused_run(overreaching_model())
    tools["refund_order"] = replace(tools["refund_order"],
                                    handler=keyed_refunds(effects)[0])
    saved, stops = paused.to_json(), []

    def worker() -> None:
        copy = paused_from_json(saved)
        stops.append(resume_with_decisions(
            copy, [approve(copy.requests[0], "maria")], overreaching_model(), tools,
            ApprovalPolicy(), run_approved=run_keyed).stop)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert stops == [Stop.ANSWERED, Stop.ANSWERED]
    assert effects == [{"order_id": "A-17", "refunded_cents": 9999}]


def test_a_call_changed_in_memory_after_loading_is_refused_and_pays_nothing() -> None:
    paused, effects, tools = paused_run(overreaching_model())
    loaded = paused_from_json(paused.to_json())
    approval = approve(loaded.requests[0], "maria")
    loaded.state.messages[-1]["tool_calls"][0]["function"]["arguments"] = json.dumps(
        {"order_id": "A-17", "amount_cents": 19999})
    with pytest.raises(ValueError, match="not the call that was decided"):
        resume_with_decisions(loaded, [approval], overreaching_model(), tools,
                              ApprovalPolicy())
    assert effects == []


def test_a_request_changed_in_memory_is_refused_too() -> None:
    paused, effects, tools = paused_run(overreaching_model())
    paused.requests[0].arguments["amount_cents"] = 19999
    with pytest.raises(ValueError, match="not the call that was decided|matches no request"):
        resume_with_decisions(paused, [approve(paused.requests[0], "maria")],
                              overreaching_model(), tools, ApprovalPolicy())
    assert effects == []


def test_an_approval_needs_no_keys_on_chapter_ones_desk() -> None:
    plain, effects = make_environment()
    paused = run_with_approvals(TASK, mixed_model(), plain, ApprovalPolicy())
    assert isinstance(paused, PausedRun)
    result = resume_with_decisions(paused, [approve(r, "m") for r in paused.requests],
                                   mixed_model(), plain, ApprovalPolicy())
    assert isinstance(result, RunResult) and result.stop == Stop.ANSWERED
    assert [e["refunded_cents"] for e in effects] == [100, 7000, 15000]
    assert all(check_run(result, effects, Limits()).values())


def test_a_keyed_resume_on_a_desk_without_keys_is_refused_before_anything_runs() -> None:
    plain, effects = make_environment()
    paused = run_with_approvals(TASK, mixed_model(), plain, ApprovalPolicy())
    assert isinstance(paused, PausedRun)
    before = (list(effects), paused.to_json())
    with pytest.raises(ValueError, match="takes no idempotency key"):
        resume_with_decisions(paused, [approve(r, "m") for r in paused.requests],
                              mixed_model(), plain, ApprovalPolicy(), run_approved=run_keyed)
    assert (effects, paused.to_json()) == before
    denials = [deny(r, "m", "no") for r in paused.requests]  # a denial needs no key
    assert isinstance(resume_with_decisions(paused, denials, mixed_model(), plain,
                                            ApprovalPolicy(), run_approved=run_keyed),
                      RunResult)


# ------------------------------------------------------ a failed model call keeps its run


class FailingModel:
    """Answers from a script until ``fail_at``, then raises like a provider outage."""

    def __init__(self, turns: list[dict[str, Any]], fail_at: int) -> None:
        self.model, self.calls, self.fail_at = ScriptedModel(turns=turns), 0, fail_at

    def chat(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls += 1
        if self.calls == self.fail_at:
            raise TimeoutError("the provider did not answer")
        return self.model.chat(messages)


def test_a_failed_model_call_carries_the_run_and_continuing_pays_nothing_twice() -> None:
    tools, effects, _ = make_keyed_environment()
    turns = [message(refund("a", 3000)), answer_message("done")]
    with pytest.raises(TimeoutError) as failure:
        run_with_approvals(TASK, FailingModel(turns, 2), tools, ApprovalPolicy(), run_id="r")
    state = failure.value.state  # type: ignore[attr-defined]
    assert [o.kind for o in state.observations] == ["result"] and len(effects) == 1
    result = continue_with_approvals("r", state, ScriptedModel(turns=turns[1:]), tools,
                                     ApprovalPolicy())
    assert isinstance(result, RunResult) and result.stop == Stop.ANSWERED
    assert len(effects) == 1 and all(check_run(result, effects, Limits()).values())
    with pytest.raises(ValueError, match="finished"):
        continue_with_approvals("r", result.state, mixed_model(), tools, ApprovalPolicy())


def test_a_model_failure_after_an_approval_keeps_the_paid_refund() -> None:
    paused, effects, tools = paused_run(overreaching_model())
    with pytest.raises(TimeoutError) as failure:
        resume_with_decisions(paused, [approve(paused.requests[0], "m")],
                              FailingModel([], 1), tools, ApprovalPolicy())
    state = failure.value.state  # type: ignore[attr-defined]
    assert state.observations[-1].content == effects[0] and len(effects) == 1
    result = continue_with_approvals(paused.run_id, state, overreaching_model(), tools,
                                     ApprovalPolicy())
    assert isinstance(result, RunResult) and result.stop == Stop.ANSWERED
    assert len(effects) == 1 and all(check_run(result, effects, Limits()).values())


def test_continuing_refuses_a_state_whose_calls_are_unanswered() -> None:
    paused, effects, tools = paused_run()
    with pytest.raises(ValueError):
        continue_with_approvals(paused.run_id, paused.state, mixed_model(), tools,
                                ApprovalPolicy())
    assert len(effects) == 1


def test_a_call_that_needs_a_person_but_shares_its_id_is_invalid_not_a_stuck_request() -> None:
    tools, effects, _ = make_keyed_environment()
    model = ScriptedModel(turns=[message(refund("c", 7000), refund("c", 100),
                                         refund("d", 8000)), answer_message("done")])
    paused = run_with_approvals(TASK, model, tools, ApprovalPolicy())
    assert isinstance(paused, PausedRun) and [r.call_id for r in paused.requests] == ["d"]
    assert [s and s.kind for s in paused.settled] == ["invalid", "result", None]
    result = resume_with_decisions(paused, [approve(paused.requests[0], "m")], model, tools,
                                   ApprovalPolicy())
    assert isinstance(result, RunResult) and [e["refunded_cents"] for e in effects] == [
        100, 8000]


class Vandal:
    """A model that rewrites every message it is given, then proposes a refund once."""

    def __init__(self) -> None:
        self.calls = 0

    def chat(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        for item in messages:
            item["content"] = "rewritten"
        self.calls += 1
        return message(refund("r", 100)) if self.calls == 1 else answer_message("done")


def test_a_model_that_rewrites_what_it_reads_cannot_change_the_record(tmp_path: Any) -> None:
    from agentbook import Journal, recover_run, refund_gate, run_durably

    tools, effects, lookup = make_keyed_environment()
    result = run_with_approvals(TASK, Vandal(), tools, ApprovalPolicy())
    assert isinstance(result, RunResult) and result.state.messages[1]["content"] == TASK
    journal = Journal(tmp_path / "vandal.jsonl")
    durable = run_durably(TASK, Vandal(), tools, refund_gate, journal)
    assert durable.state.messages[1]["content"] == TASK
    assert all(check_run(durable, effects[1:], Limits()).values())
    assert recover_run(journal, Vandal(), tools, refund_gate, lookup=lookup).answer == "done"
