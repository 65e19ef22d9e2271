"""Property-based tests: the parser and the loop against generated model output.

The unit tests pin the chapter's examples. Here Hypothesis makes up the
model's side of the conversation, well formed or not, and we check the
promises that must hold for every input: the parser never raises, and every
run ends with a typed stop, inside its budgets, with no money moved unless
the gate allowed it.
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

from hypothesis import Phase, event, given, settings
from hypothesis import strategies as st

from agentbook import (
    AUTO_REFUND_LIMIT_CENTS,
    RunResult,
    RunState,
    TRANSCRIPT_WIDTH,
    Limits,
    ScriptedModel,
    Stop,
    ToolCall,
    answer_message,
    check_run,
    estimate_tokens,
    make_environment,
    parse_tool_calls,
    print_transcript,
    refund_gate,
    resume_agent,
    run_agent,
    state_from_json,
    state_to_json,
    validate_call,
)

TOOLS, _ = make_environment()  # only read by validate_call, never executed

# ------------------------------------------------------- any JSON, any shape

# Any code point at all, lone surrogates included: json.loads makes those from "\ud800"
# escapes, so a model can send them. A plain st.text() would also skip surrogates, and it
# makes Hypothesis build a Unicode table (about a second) that it then caches on disk.
any_character = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())


def texts(max_size: int) -> st.SearchStrategy[str]:
    return st.text(any_character, max_size=max_size)


scalars = st.none() | st.booleans() | st.integers() | st.floats() | texts(8)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts(5), inner, max_size=3),
    max_leaves=5,
)


def prefixes(text: str) -> st.SearchStrategy[str]:
    """Every cut-off version of a JSON text, down to the empty string."""
    return st.integers(0, len(text)).map(lambda end: text[:end])


field_names = st.sampled_from(["order_id", "amount_cents", "note"]) | texts(5)
object_texts = st.dictionaries(field_names, json_values, max_size=3).map(json.dumps)
any_json_texts = json_values.map(json.dumps)
argument_texts = st.one_of(
    object_texts,                                   # a JSON object: the right shape
    any_json_texts,                                 # valid JSON of any type
    (object_texts | any_json_texts).flatmap(prefixes),  # truncated JSON
    st.just(""),
    texts(12),
    st.just("[" * 2000 + "]" * 2000),               # nested deeper than json.loads can go
)
tool_names = st.sampled_from(["lookup_order", "read_policy", "refund_order", "nope", ""])

# Each level is either any JSON at all, or the right shape with every field optional
# and of any type, or the right shape with the right field types, so that generated
# messages reach every check of the parser, down to json.loads on the arguments.
functions = st.one_of(
    json_values,
    st.fixed_dictionaries({}, optional={"name": tool_names | json_values,
                                        "arguments": argument_texts | json_values}),
    st.fixed_dictionaries({"name": tool_names, "arguments": argument_texts}),
)
entries = st.one_of(
    json_values,
    st.fixed_dictionaries({}, optional={"id": texts(6) | json_values,
                                        "type": st.just("function") | json_values,
                                        "function": functions}),
    st.fixed_dictionaries({"id": texts(6), "type": st.just("function"), "function": functions}),
)
tool_calls_values = json_values | st.lists(entries, max_size=4)
messages = st.one_of(
    json_values,
    st.fixed_dictionaries({}, optional={"role": st.just("assistant") | json_values,
                                        "content": json_values,
                                        "tool_calls": tool_calls_values}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none(),
                           "tool_calls": st.lists(entries, max_size=4)}),
)


def well_formed(entry: Any) -> bool:
    """Our own reading of the wire format: does this entry carry a usable call?"""
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
        return False
    function = entry.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return False
    if not isinstance(function.get("arguments"), str):
        return False
    try:
        return isinstance(json.loads(function["arguments"]), dict)
    except (ValueError, RecursionError):
        return False


def assert_is_a_call(call: Any) -> None:
    assert isinstance(call, ToolCall)
    assert isinstance(call.call_id, str)
    assert isinstance(call.name, str)
    assert call.arguments is None or isinstance(call.arguments, dict)


@given(messages)
def test_parse_never_raises_on_a_message_of_any_shape(message):
    calls = parse_tool_calls(message)
    for call in calls:
        assert_is_a_call(call)
    tool_calls = message.get("tool_calls") if isinstance(message, dict) else None
    if tool_calls is None or tool_calls == []:
        assert calls == []
    elif not isinstance(tool_calls, list):
        (call,) = calls
        assert call.call_id == "missing-id-0"
        assert validate_call(call, TOOLS) == "tool_calls must be a list"
    else:
        assert len(calls) == len(tool_calls)


@given(st.lists(entries, min_size=1, max_size=5))
def test_parse_reads_every_entry_and_rejects_each_malformed_one(raw_entries):
    calls = parse_tool_calls({"role": "assistant", "content": None, "tool_calls": raw_entries})
    assert len(calls) == len(raw_entries)
    for index, (raw, call) in enumerate(zip(raw_entries, calls, strict=True)):
        assert_is_a_call(call)
        has_id = isinstance(raw, dict) and isinstance(raw.get("id"), str)
        assert call.call_id == (raw["id"] if has_id else f"missing-id-{index}")
        if well_formed(raw):
            assert call.arguments == json.loads(raw["function"]["arguments"])
            assert call.name == raw["function"]["name"]
            assert call.problem is None
        else:
            assert call.arguments is None
            reason = validate_call(call, TOOLS)
            assert isinstance(reason, str) and reason
            assert reason == call.problem


# ------------------------------------------------------- generated scripted runs


def raw_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


call_ids = st.sampled_from(["c1", "c2", "c3"]) | texts(4)
order_ids = st.sampled_from(["A-17", "Z-99"])


def refunds(amounts: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda i, o, a: raw_call(i, "refund_order",
                                              {"order_id": o, "amount_cents": a}),
                     call_ids, order_ids, amounts)


amounts = st.one_of(
    st.integers(1, AUTO_REFUND_LIMIT_CENTS),                  # allowed
    st.integers(AUTO_REFUND_LIMIT_CENTS + 1, 10**12),         # over the limit
    st.integers(-(10**12), 0),                                # not positive
    st.booleans(),                                            # a bool, which is not an int
    st.floats(),                                              # not a whole number
)
any_arguments = st.builds(
    lambda i, n, a: {"id": i, "type": "function", "function": {"name": n, "arguments": a}},
    call_ids, tool_names, argument_texts)
run_entries = st.one_of(
    st.builds(lambda i, o: raw_call(i, "lookup_order", {"order_id": o}), call_ids, order_ids),
    st.builds(lambda i: raw_call(i, "read_policy", {}), call_ids),
    refunds(amounts), refunds(amounts), refunds(amounts),     # refunds are what matter most
    any_arguments,                                            # broken, truncated, not objects
    entries,                                                  # malformed in any other way
)
call_messages = st.lists(run_entries, min_size=1, max_size=4).map(
    lambda es: {"role": "assistant", "content": None, "tool_calls": es})
# Replies after which the loop carries on, and replies that end the run.
going_on = call_messages | tool_calls_values.map(
    lambda tc: {"role": "assistant", "content": None, "tool_calls": tc})
ending = texts(20).map(answer_message) | scalars | st.lists(json_values, max_size=3)
# A script is a stretch of proposals, then a short tail that may end the run early; a
# reply that is not a dict is wrapped by the loop as a plain answer.
scripts = st.builds(lambda body, tail: body + tail,
                    st.lists(going_on, max_size=8), st.lists(going_on | ending, max_size=2))
scripted_models = st.builds(
    ScriptedModel,
    turns=scripts,
    reactions=st.dictionaries(st.sampled_from(["denied", "invalid", "error", "result", "A-17"]),
                              going_on | texts(10).map(answer_message),
                              max_size=2),
)
# Hypothesis leans towards small numbers, and a budget under the first prompt (about 54
# tokens) ends the run before any model call. Drawing 5050 - n leans towards roomy
# budgets instead, and 850 - n towards budgets a few turns can use up; 50 stays reachable.
budgets = st.integers(50, 5000).map(lambda n: 5050 - n) | st.integers(50, 800).map(
    lambda n: 850 - n)
limits = st.builds(Limits, max_turns=st.integers(1, 12), max_prompt_tokens=budgets,
                   repeated_denials=st.integers(1, 3))


def all_true(report: dict[str, bool]) -> bool:
    return len(report) == 4 and all(report.values())


def print_quietly(state: Any) -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        print_transcript(state)
    return buffer.getvalue()


@given(scripted_models, limits)
def test_every_generated_run_ends_typed_bounded_and_moves_only_allowed_money(model, limits):
    tools, effects = make_environment()
    result = run_agent("Order A-17 arrived damaged. Please make this right.", model, tools,
                       refund_gate, limits)
    state = result.state
    assert isinstance(result.stop, Stop)
    assert state.turns <= limits.max_turns
    assert len(state.prompt_token_log) == state.turns
    assert all(tokens <= limits.max_prompt_tokens for tokens in state.prompt_token_log)
    assert len(state.messages) == 2 + state.turns + len(state.observations)
    assert all_true(check_run(result, effects, limits))

    allowed = [o.content for o in state.observations if o.ok]
    for receipt in effects:
        cents = receipt["refunded_cents"]
        assert type(cents) is int
        assert 0 < cents <= AUTO_REFUND_LIMIT_CENTS
        assert receipt in allowed
    # In order and one for one: each allowed refund wrote exactly its receipt.
    assert effects == [c for c in allowed if isinstance(c, dict) and "refunded_cents" in c]

    if result.stop is Stop.ANSWERED:
        assert parse_tool_calls(state.messages[-1]) == []
    elif result.stop is Stop.STEP_LIMIT:
        assert state.turns == limits.max_turns
    elif result.stop is Stop.TOKEN_LIMIT:
        assert estimate_tokens(state.messages) > limits.max_prompt_tokens
    else:
        # The run stopped at a denial; whatever that message proposed after
        # it was answered as skipped, and nothing ran for it.
        kinds = [o.kind for o in state.observations]
        executed = len(kinds) - kinds[::-1].index("denied")
        assert set(kinds[executed:]) <= {"skipped"}
        assert "skipped" not in kinds[:executed]
    printed = print_quietly(state)  # the transcript of any such run can be printed
    assert all(len(line) <= TRANSCRIPT_WIDTH for line in printed.splitlines())
    event(f"stop={result.stop.value}")
    event(f"receipts={len(effects)}")


# A reply that claims another role, or none, is still the model's reply: run_agent stores
# it as an assistant message, so the run stays checkable and printable.
odd_roles = st.none() | st.sampled_from(["user", "tool", "system"]) | json_values


@settings(phases=[Phase.explicit, Phase.generate, Phase.shrink])  # skip the slow explain step
@given(st.fixed_dictionaries({"tool_calls": st.lists(run_entries, min_size=1, max_size=3)},
                             optional={"role": odd_roles}), limits)
def test_runs_stay_checkable_whatever_role_the_reply_claims(reply, limits):
    tools, effects = make_environment()
    result = run_agent("Refund order A-17.", ScriptedModel(turns=[reply]), tools, refund_gate,
                       limits)
    assert all_true(check_run(result, effects, limits))
    print_quietly(result.state)


# ------------------------------------------------ stops inside a message

# Each entry of a generated message: a lookup (runs), a refund the gate allows,
# or one of two over-limit refunds whose repeats the no-progress rule counts.
MOVES = {
    "lookup": ("lookup_order", {"order_id": "A-17"}),
    "allowed": ("refund_order", {"order_id": "A-17", "amount_cents": 100}),
    "too much": ("refund_order", {"order_id": "A-17", "amount_cents": 9999}),
    "far too much": ("refund_order", {"order_id": "A-17", "amount_cents": 10**6}),
}
move_lists = st.lists(st.sampled_from(sorted(MOVES)), min_size=1, max_size=6)


def proposals_of(moves: list[str], turn: int) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        raw_call(f"t{turn}-{index}", *MOVES[move]) for index, move in enumerate(moves)]}


def answered_in_order(messages: list[dict[str, Any]]) -> bool:
    """Each assistant message's calls are answered, in order, by the tool messages after it."""
    pending: list[str] = []
    for message in messages:
        if message["role"] == "assistant":
            if pending:
                return False
            pending = [call.call_id for call in parse_tool_calls(message)]
        elif message["role"] == "tool":
            if not pending or message["tool_call_id"] != pending.pop(0):
                return False
    return not pending


def gated_run_of(turns: list[list[str]],
                 denials: int) -> tuple[RunResult, list[dict[str, Any]]]:
    """Play generated turns of proposals behind refund_gate; the result and effect log."""
    tools, effects = make_environment()
    model = ScriptedModel(turns=[proposals_of(moves, n) for n, moves in enumerate(turns)])
    result = run_agent("Refund order A-17.", model, tools, refund_gate,
                       Limits(repeated_denials=denials))
    return result, effects


@given(st.lists(move_lists, min_size=1, max_size=4), st.integers(1, 3))
def test_a_stop_at_any_position_of_a_message_leaves_every_call_answered(turns, denials):
    result, effects = gated_run_of(turns, denials)
    state = result.state
    assert answered_in_order(state.messages)
    assert all_true(check_run(result, effects, Limits(repeated_denials=denials)))
    kinds = [o.kind for o in state.observations]
    played = [move for moves in turns[:state.turns] for move in moves]
    assert len(kinds) == len(played)
    executed = kinds.index("skipped") if "skipped" in kinds else len(kinds)
    assert set(kinds[executed:]) <= {"skipped"}
    # Only the calls before the stop ran: one receipt per allowed refund among them.
    assert len(effects) == played[:executed].count("allowed")
    if executed < len(kinds):
        assert result.stop is Stop.NO_PROGRESS and kinds[executed - 1] == "denied"
        event(f"skipped after position {executed - sum(map(len, turns[:state.turns - 1]))}")


@given(st.lists(move_lists, min_size=1, max_size=4), st.integers(1, 3))
def test_check_run_notices_any_one_answer_taken_away_or_repeated(turns, denials):
    result, effects = gated_run_of(turns, denials)
    answers = [i for i, m in enumerate(result.state.messages) if m["role"] == "tool"]
    for index in answers:
        for broken in (result.state.messages[:index] + result.state.messages[index + 1:],
                       result.state.messages[:index + 1] + result.state.messages[index:]):
            damaged = RunResult(result.stop, result.answer, RunState(
                broken, result.state.observations, result.state.prompt_token_log,
                result.state.turns))
            assert check_run(damaged, effects, Limits())["observations_correlated"] is False


# ------------------------------------------------ saved and resumed runs


def copy_of(model: ScriptedModel) -> ScriptedModel:
    return ScriptedModel(turns=list(model.turns), reactions=dict(model.reactions))


@settings(phases=[Phase.explicit, Phase.generate, Phase.shrink])
@given(scripted_models, limits, st.integers(1, 12))
def test_a_saved_and_resumed_run_ends_as_the_uninterrupted_one(model, limits, pause_at):
    tools_once, effects_once = make_environment()
    once = run_agent("Order A-17 arrived damaged.", copy_of(model), tools_once, refund_gate,
                     limits)
    tools, effects = make_environment()
    first = run_agent("Order A-17 arrived damaged.", copy_of(model), tools, refund_gate,
                      Limits(min(pause_at, limits.max_turns), limits.max_prompt_tokens,
                             limits.repeated_denials))
    # Every state the loop makes can be saved: a reply holding a NaN or an infinity is
    # stored with a note in its place, and its calls are answered invalid.
    saved = state_to_json(first.state)
    assert state_from_json(saved) == first.state
    if first.stop is not Stop.STEP_LIMIT:
        assert (first.stop, first.state) == (once.stop, once.state)
        return
    resumed = resume_agent(state_from_json(saved), copy_of(model), tools, refund_gate, limits)
    assert (resumed.stop, resumed.answer) == (once.stop, once.answer)
    assert resumed.state == once.state
    assert effects == effects_once
    event(f"resumed after {first.state.turns} turns, ended {once.stop.value}")
