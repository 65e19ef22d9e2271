"""The kernel's promises about stops, transcripts and saved runs.

A stop in the middle of a message answers every call it leaves behind; a
run's state survives JSON exactly, refuses damaged text, and a resumed run
ends exactly as one that never paused.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from agentbook import (
    RUN_STATE_FORMAT,
    Limits,
    Observation,
    RunResult,
    RunState,
    ScriptedModel,
    Stop,
    ToolSpec,
    allow_all,
    answer_message,
    check_run,
    make_environment,
    overreaching_model,
    refund_gate,
    resume_agent,
    run_agent,
    state_from_json,
    state_to_json,
    tool_call_message,
)

TASK = "Order A-17 arrived damaged. Please make this right."
TOO_MUCH = {"order_id": "A-17", "amount_cents": 9999}
PAID = {"order_id": "A-17", "amount_cents": 4999}
LOOKUP = {"order_id": "A-17"}


def one_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return tool_call_message(call_id, name, arguments)["tool_calls"][0]


def message_of(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(entries)}


def counting_desk() -> tuple[dict[str, ToolSpec], list[dict[str, Any]], list[str]]:
    """A desk whose handlers note each call they serve, by tool name."""
    tools, effects = make_environment()
    served: list[str] = []

    def counted(name: str, spec: ToolSpec) -> ToolSpec:
        def handler(**arguments: Any) -> Any:
            served.append(name)
            return spec.handler(**arguments)
        return ToolSpec(spec.description, spec.schema, handler, spec.effectful)

    return {name: counted(name, spec) for name, spec in tools.items()}, effects, served


def three_at_once() -> dict[str, Any]:
    return message_of(one_call("m1", "refund_order", TOO_MUCH),
                      one_call("m2", "refund_order", TOO_MUCH),
                      one_call("m3", "lookup_order", LOOKUP))


# ------------------------------------------------------ stops mid-message


def test_a_stop_mid_message_answers_the_rest_as_skipped_and_runs_nothing():
    tools, effects, served = counting_desk()
    result = run_agent(TASK, ScriptedModel(turns=[three_at_once()]), tools, refund_gate)
    assert (result.stop, result.state.turns) == (Stop.NO_PROGRESS, 1)
    assert [(o.call_id, o.kind, o.ok) for o in result.state.observations] == [
        ("m1", "denied", False), ("m2", "denied", False), ("m3", "skipped", False)]
    assert served == [] and effects == []
    last = result.state.messages[-1]
    assert last["tool_call_id"] == "m3"
    assert json.loads(last["content"]) == {
        "ok": False, "kind": "skipped",
        "content": "not run: the run stopped (no_progress) before this call"}
    assert all(check_run(result, effects, Limits()).values())


@pytest.mark.parametrize("stop_at", range(5))
def test_every_call_after_the_stopping_denial_is_skipped_wherever_it_falls(stop_at):
    # Lookups before the position, the second identical refund at it, lookups after.
    entries = [one_call(f"l{n}", "lookup_order", LOOKUP) for n in range(stop_at)]
    entries += [one_call("r1", "refund_order", TOO_MUCH)] if stop_at else []
    entries += [one_call("r2", "refund_order", TOO_MUCH)]
    entries += [one_call(f"a{n}", "lookup_order", LOOKUP) for n in range(3)]
    first = message_of(one_call("r0", "refund_order", TOO_MUCH)) if not stop_at else None
    turns = [first, message_of(*entries)] if first else [message_of(*entries)]
    tools, effects, served = counting_desk()
    result = run_agent(TASK, ScriptedModel(turns=turns), tools, refund_gate)
    kinds = [o.kind for o in result.state.observations]
    assert result.stop is Stop.NO_PROGRESS
    assert kinds[-3:] == ["skipped"] * 3 and kinds[-4] == "denied"
    assert served == ["lookup_order"] * stop_at
    assert effects == []
    assert all(check_run(result, effects, Limits()).values())


def test_a_run_that_stops_between_messages_skips_nothing():
    tools, effects = make_environment()
    result = run_agent(TASK, overreaching_model(), tools, refund_gate, Limits(max_turns=2))
    assert result.stop is Stop.STEP_LIMIT
    assert "skipped" not in [o.kind for o in result.state.observations]


# ---------------------------------------------- check_run, both directions


def finished(turns: list[Any]) -> tuple[RunResult, list[dict[str, Any]]]:
    tools, effects = make_environment()
    return run_agent(TASK, ScriptedModel(turns=turns), tools, refund_gate), effects


def correlated(result: RunResult, effects: list[dict[str, Any]]) -> bool:
    return check_run(result, effects, Limits())["observations_correlated"]


def test_check_run_detects_a_call_that_was_never_answered():
    result, effects = finished([three_at_once()])
    assert correlated(result, effects)
    del result.state.messages[-1]  # the skipped lookup's answer
    assert not correlated(result, effects)


def test_check_run_detects_a_call_answered_twice():
    result, effects = finished([three_at_once()])
    result.state.messages.append(dict(result.state.messages[-1]))
    assert not correlated(result, effects)


def test_check_run_wants_the_answers_before_the_model_speaks_again():
    result, effects = finished([message_of(one_call("c1", "lookup_order", LOOKUP))])
    messages = result.state.messages  # system, user, call, answer, final answer
    messages[3], messages[4] = messages[4], messages[3]
    assert not correlated(result, effects)


def test_check_run_counts_a_reused_id_once_per_proposal():
    reused = message_of(one_call("c1", "lookup_order", LOOKUP),
                        one_call("c1", "read_policy", {}))
    result, effects = finished([reused, reused])
    assert [o.call_id for o in result.state.observations] == ["c1"] * 4
    assert correlated(result, effects)
    del result.state.messages[3]
    assert not correlated(result, effects)


@pytest.mark.parametrize("answer_to", [None, 7, ["c1"]])
def test_check_run_refuses_a_tool_message_whose_id_is_not_text(answer_to):
    result, effects = finished([message_of(one_call("c1", "lookup_order", LOOKUP))])
    result.state.messages[3]["tool_call_id"] = answer_to
    assert not correlated(result, effects)


# --------------------------------------------------------- saving to JSON


def sample_runs() -> dict[str, RunResult]:
    """Runs that end every way, with every kind of observation in them."""
    runs = {}
    for name, model, gate, limits in [
        ("gated", overreaching_model(), refund_gate, Limits()),
        ("ungated", overreaching_model(), allow_all, Limits()),
        ("paused", overreaching_model(), refund_gate, Limits(max_turns=2)),
        ("mid-message", ScriptedModel(turns=[three_at_once()]), refund_gate, Limits()),
        ("missing order", ScriptedModel(turns=[tool_call_message(
            "e1", "lookup_order", {"order_id": "Z-99"})]), refund_gate, Limits()),
        ("malformed", ScriptedModel(turns=[{"tool_calls": "refund everything"}]),
         refund_gate, Limits()),
        ("odd reply", ScriptedModel(turns=[42]), refund_gate, Limits()),  # type: ignore[list-item]
        ("token limit", ScriptedModel(turns=[tool_call_message("w", "lookup_order", LOOKUP)],
                                      reactions={"order_id": tool_call_message(
                                          "w", "lookup_order", LOOKUP)}),
         refund_gate, Limits(max_turns=40, max_prompt_tokens=400)),
    ]:
        tools, _ = make_environment()
        runs[name] = run_agent(TASK, model, tools, gate, limits)
    return runs


SAMPLES = sample_runs()


@pytest.mark.parametrize("name", SAMPLES)
def test_a_state_comes_back_from_json_equal(name):
    state = SAMPLES[name].state
    loaded = state_from_json(state_to_json(state))
    assert loaded == state
    assert loaded is not state and loaded.messages is not state.messages


def test_the_samples_hold_every_kind_of_observation_and_ending():
    kinds = {o.kind for r in SAMPLES.values() for o in r.state.observations}
    assert kinds == {"result", "invalid", "denied", "error", "skipped"}
    assert {r.stop for r in SAMPLES.values()} == set(Stop)


def test_saved_text_names_its_format():
    saved = json.loads(state_to_json(SAMPLES["gated"].state))
    assert saved["format"] == RUN_STATE_FORMAT
    assert list(saved) == ["format", "messages", "observations", "prompt_token_log", "turns",
                           "stop"]
    assert saved["stop"] == "answered"


@pytest.mark.parametrize("content", [(1, 2), {1: "a"}, float("nan"), float("inf"), object()])
def test_a_state_that_json_would_change_is_refused_when_saved(content):
    state = copy.deepcopy(SAMPLES["gated"].state)
    observation = state.observations[0]
    state.observations[0] = Observation(observation.call_id, True, "result", content)
    with pytest.raises(ValueError, match="run state cannot be saved"):
        state_to_json(state)


def test_every_cut_short_save_is_refused_with_a_reason():
    saved = state_to_json(SAMPLES["mid-message"].state)
    for end in range(len(saved)):
        with pytest.raises(ValueError, match="not valid JSON|damaged"):
            state_from_json(saved[:end])


def edited(change) -> str:
    data = json.loads(state_to_json(SAMPLES["gated"].state))
    change(data)
    return json.dumps(data)


DAMAGE = {
    "format": lambda d: d.update(format="some other format"),
    "extra field": lambda d: d.update(note="hi"),
    "missing field": lambda d: d.pop("turns"),
    "turns": lambda d: d.update(turns=3),
    "turns a bool": lambda d: d.update(turns=True),
    "negative turns": lambda d: d.update(turns=-4),
    "token log": lambda d: d["prompt_token_log"].pop(),
    "token as text": lambda d: d["prompt_token_log"].__setitem__(0, "54"),
    "messages not a list": lambda d: d.update(messages={}),
    "message not an object": lambda d: d["messages"].__setitem__(0, "system"),
    "role missing": lambda d: d["messages"][1].pop("role"),
    "assistant removed": lambda d: d["messages"].pop(2),
    "tool message edited": lambda d: d["messages"][3].update(content="{}"),
    "tool message removed": lambda d: d["messages"].pop(3),
    "observation removed": lambda d: d["observations"].pop(),
    "observation kind": lambda d: d["observations"][0].update(kind="fine"),
    "observation kind unhashable": lambda d: d["observations"][0].update(kind=["result"]),
    "observation ok": lambda d: d["observations"][0].update(ok=1),
    "observation id": lambda d: d["observations"][0].update(call_id=1),
    "observation field": lambda d: d["observations"][0].pop("content"),
    "observation content": lambda d: d["observations"][1].update(content="allowed"),
    "observations not a list": lambda d: d.update(observations=None),
    # The tool messages still match the observations; only the pairing with calls breaks.
    "call id edited": lambda d: d["messages"][2]["tool_calls"][0].update(id="x9"),
    "call removed": lambda d: d["messages"][2].update(tool_calls=[]),
    "unanswered call added": lambda d: d["messages"][2]["tool_calls"].append(
        dict(d["messages"][2]["tool_calls"][0], id="extra")),
    "answer moved ahead of its call": lambda d: d["messages"].insert(2, d["messages"].pop(3)),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_an_edited_save_is_refused_with_a_reason(damage):
    with pytest.raises(ValueError, match="saved run state is damaged: .+"):
        state_from_json(edited(DAMAGE[damage]))


@pytest.mark.parametrize("text", ["", "null", "[]", '"a state"', "{}", "[" * 100000])
def test_text_that_is_no_saved_state_is_refused(text):
    with pytest.raises(ValueError, match="saved run state"):
        state_from_json(text)


def test_a_refused_load_changes_nothing():
    state = SAMPLES["paused"].state
    before = copy.deepcopy(state)
    saved = state_to_json(state)
    with pytest.raises(ValueError):
        state_from_json(saved[:-1])
    assert state == before
    assert state_from_json(saved) == before  # the good text still loads


# ------------------------------------------------------------- resuming


def uninterrupted(model_factory, gate, limits):
    tools, effects = make_environment()
    return run_agent(TASK, model_factory(), tools, gate, limits), effects


def paused_and_resumed(model_factory, gate, pause_at, limits, fresh_model=True):
    tools, effects = make_environment()
    model = model_factory()
    first = run_agent(TASK, model, tools, gate, Limits(
        pause_at, limits.max_prompt_tokens, limits.repeated_denials))
    assert first.stop is Stop.STEP_LIMIT
    state = state_from_json(state_to_json(first.state))
    resumed = resume_agent(state, model_factory() if fresh_model else model, tools, gate,
                           limits)
    return resumed, effects


def stubborn() -> ScriptedModel:
    insist = tool_call_message("s", "refund_order", TOO_MUCH)
    return ScriptedModel(turns=[insist], reactions={"denied": insist})


def wanderer() -> ScriptedModel:
    again = tool_call_message("w", "lookup_order", LOOKUP)
    return ScriptedModel(turns=[again], reactions={"order_id": again})


def happy() -> ScriptedModel:
    return ScriptedModel(turns=[tool_call_message("c1", "lookup_order", LOOKUP),
                                tool_call_message("c2", "refund_order", PAID),
                                answer_message("Refunded 4999 cents.")])


SCENARIOS = {
    "over-reach, gated": (overreaching_model, refund_gate, Limits()),
    "over-reach, ungated": (overreaching_model, allow_all, Limits()),
    "happy": (happy, allow_all, Limits()),
    "stubborn": (stubborn, refund_gate, Limits(repeated_denials=3)),
    "wanderer": (wanderer, refund_gate, Limits(max_turns=40, max_prompt_tokens=1200)),
}


@pytest.mark.parametrize("fresh_model", [True, False])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_resumed_run_ends_exactly_as_one_that_never_paused(scenario, fresh_model):
    model_factory, gate, limits = SCENARIOS[scenario]
    once, effects_once = uninterrupted(model_factory, gate, limits)
    for pause_at in range(1, once.state.turns):
        resumed, effects = paused_and_resumed(model_factory, gate, pause_at, limits,
                                              fresh_model)
        assert (resumed.stop, resumed.answer) == (once.stop, once.answer)
        assert resumed.state == once.state
        assert effects == effects_once


def test_resuming_counts_the_denials_from_before_the_pause():
    # Two denials of the same refund end the run, even with a pause between them.
    resumed, effects = paused_and_resumed(stubborn, refund_gate, 1, Limits())
    assert (resumed.stop, resumed.state.turns) == (Stop.NO_PROGRESS, 2)
    assert effects == []


def test_resuming_a_finished_run_returns_it_without_calling_the_model():
    tools, effects = make_environment()
    done = run_agent(TASK, happy(), tools, allow_all)

    class Silent:
        def chat(self, messages):
            raise AssertionError("a finished run asked the model again")

    again = resume_agent(state_from_json(state_to_json(done.state)), Silent(), tools,
                         allow_all)
    assert (again.stop, again.answer) == (Stop.ANSWERED, "Refunded 4999 cents.")
    assert again.state == done.state
    assert effects == [{"order_id": "A-17", "refunded_cents": 4999}]


def test_a_finished_run_goes_on_once_the_user_speaks_again():
    tools, _ = make_environment()
    model = ScriptedModel(turns=[answer_message("first"), answer_message("second")])
    done = run_agent(TASK, model, tools, allow_all)
    done.state.messages.append({"role": "user", "content": "And?"})
    again = resume_agent(done.state, model, tools, allow_all)
    assert (again.stop, again.answer, again.state.turns) == (Stop.ANSWERED, "second", 2)


def test_resume_extends_the_state_it_is_given():
    tools, _ = make_environment()
    state = RunState([{"role": "system", "content": "s"}, {"role": "user", "content": TASK}])
    result = resume_agent(state, happy(), tools, allow_all)
    assert result.state is state and state.turns == 3


def test_a_model_failure_leaves_the_state_consistent_for_a_later_resume():
    tools, effects = make_environment()

    class Unreachable:
        def chat(self, messages):
            raise ConnectionError("nobody listening")

    paused = run_agent(TASK, overreaching_model(), tools, refund_gate, Limits(max_turns=2))
    with pytest.raises(ConnectionError):
        resume_agent(paused.state, Unreachable(), tools, refund_gate)
    assert len(paused.state.prompt_token_log) == paused.state.turns == 2
    later = resume_agent(state_from_json(state_to_json(paused.state)), overreaching_model(),
                         tools, refund_gate)
    assert (later.stop, later.state.turns) == (Stop.ANSWERED, 4)
    assert effects == [{"order_id": "A-17", "refunded_cents": 4999}]


# ----------------------------------------------- the scripted model's place


def test_a_fresh_scripted_model_reads_its_place_from_the_transcript():
    first, second, third = (answer_message(t) for t in ("one", "two", "three"))
    model = ScriptedModel(turns=[first, second, third])
    transcript = [{"role": "user", "content": "hi"}, first, {"role": "user", "content": "go"}]
    assert model.chat(transcript) is second


def test_reactions_in_the_transcript_do_not_count_as_scripted_turns():
    scripted, reaction = answer_message("scripted"), answer_message("reaction")
    model = ScriptedModel(turns=[scripted, answer_message("next")],
                          reactions={"denied": reaction})
    denial = {"role": "tool", "content": "denied"}
    transcript = [{"role": "user", "content": "hi"}, denial, reaction,
                  {"role": "tool", "content": "fine"}]
    assert model.chat(transcript) is scripted


def test_separate_fresh_transcripts_still_get_the_script_in_order():
    first, second = answer_message("billing"), answer_message("the reply")
    model = ScriptedModel(turns=[first, second])
    assert model.chat([{"role": "user", "content": "route"}]) is first
    assert model.chat([{"role": "user", "content": "draft"}]) is second
    assert model.played == 2
