"""Runs seen from outside: OpenTelemetry spans, OTLP/JSON, and the trace read back."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import StatusCode

from agentbook import (
    TRACE_ORIGIN_NS,
    Limits,
    RunExplorer,
    RunResult,
    ScriptedModel,
    Stop,
    answer_message,
    explore_trace,
    make_environment,
    overreaching_model,
    refund_gate,
    run_agent,
    run_spans,
    spans_to_otlp_json,
    tool_call_message,
    trace_to_run,
)

TASK = "Order A-17 arrived damaged. Please make this right."
# Every attribute name the conventions define, read from the pinned package.
CONVENTION_NAMES = {value for name, value in vars(gen_ai_attributes).items()
                    if name.startswith("GEN_AI_") and isinstance(value, str)} | {ERROR_TYPE}


def entry(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return tool_call_message(call_id, name, arguments)["tool_calls"][0]


def message(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(entries)}


def gated_run() -> RunResult:
    tools, _ = make_environment()
    return run_agent(TASK, overreaching_model(), tools, refund_gate)


def every_kind_run() -> RunResult:
    """A run with a result, an invalid call, an error, a denial and skipped calls."""
    too_much = {"order_id": "A-17", "amount_cents": 9999}
    tools, _ = make_environment()
    model = ScriptedModel(turns=[
        message(entry("ok", "lookup_order", {"order_id": "A-17"}),
                entry("bad", "no_such_tool", {}),
                entry("missing", "lookup_order", {"order_id": "Z-1"})),
        message(entry("d1", "refund_order", too_much), entry("d2", "refund_order", too_much),
                entry("after", "read_policy", {}))])
    return run_agent(TASK, model, tools, refund_gate)


def test_one_agent_span_holds_a_chat_span_per_model_call_and_a_tool_span_per_call() -> None:
    result = gated_run()
    spans = run_spans(result)
    root, children = spans[0], spans[1:]
    assert root.parent is None and root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert all(span.parent.span_id == root.context.span_id for span in children)
    chats = [s for s in children if s.attributes["gen_ai.operation.name"] == "chat"]
    tools = [s for s in children if s.attributes["gen_ai.operation.name"] == "execute_tool"]
    assert len(chats) == result.state.turns and len(tools) == len(result.state.observations)
    assert [s.attributes["gen_ai.usage.input_tokens"] for s in chats] == \
        result.state.prompt_token_log
    assert [s.attributes["gen_ai.tool.call.id"] for s in tools] == [
        o.call_id for o in result.state.observations]
    assert [s.attributes["gen_ai.tool.name"] for s in tools] == [
        "lookup_order", "refund_order", "refund_order"]


def test_every_kind_but_result_is_an_error_span_named_by_its_kind() -> None:
    result = every_kind_run()
    assert result.stop == Stop.NO_PROGRESS
    tools = [s for s in run_spans(result)
             if s.attributes["gen_ai.operation.name"] == "execute_tool"]
    kinds = [o.kind for o in result.state.observations]
    assert kinds == ["result", "invalid", "error", "denied", "denied", "skipped"]
    for span, observation in zip(tools, result.state.observations, strict=True):
        if observation.ok:
            assert span.status.status_code == StatusCode.UNSET
            assert json.loads(span.attributes["gen_ai.tool.call.result"]) == observation.content
        else:
            assert span.status.status_code == StatusCode.ERROR
            assert span.attributes[ERROR_TYPE] == observation.kind
            assert span.status.description == str(observation.content)


def test_the_agent_span_carries_the_stop_when_the_run_did_not_answer() -> None:
    root = run_spans(every_kind_run())[0]
    assert root.status.status_code == StatusCode.ERROR
    assert root.attributes[ERROR_TYPE] == "no_progress"
    answered = run_spans(gated_run())[0]
    assert answered.status.status_code == StatusCode.UNSET
    assert ERROR_TYPE not in answered.attributes


@pytest.mark.parametrize("make", [gated_run, every_kind_run])
def test_only_genai_convention_attributes_are_used(make: Any) -> None:
    for span in run_spans(make()):
        assert set(span.attributes) <= CONVENTION_NAMES, span.name


def test_ids_and_times_come_from_the_run() -> None:
    first, again = spans_to_otlp_json(run_spans(gated_run())), spans_to_otlp_json(
        run_spans(gated_run()))
    assert first == again
    other = spans_to_otlp_json(run_spans(every_kind_run()))
    trace_id = json.loads(first)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
    assert trace_id not in other
    starts = [s.start_time for s in run_spans(gated_run())]
    assert starts == sorted(starts) and starts[0] == TRACE_ORIGIN_NS


def test_the_otlp_json_uses_hex_ids_and_text_for_64_bit_numbers() -> None:
    document = json.loads(spans_to_otlp_json(run_spans(gated_run())))
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    root = spans[0]
    assert len(root["traceId"]) == 32 and len(root["spanId"]) == 16
    int(root["traceId"], 16), int(root["spanId"], 16)
    assert "parentSpanId" not in root
    assert {s["parentSpanId"] for s in spans[1:]} == {root["spanId"]}
    assert {s["traceId"] for s in spans} == {root["traceId"]}
    assert all(isinstance(s["startTimeUnixNano"], str) for s in spans)
    tokens = [a["value"] for s in spans for a in s["attributes"]
              if a["key"] == "gen_ai.usage.input_tokens"]
    assert tokens and all(set(v) == {"intValue"} and isinstance(v["intValue"], str)
                          for v in tokens)
    assert {s["kind"] for s in spans} == {1, 3}  # internal, client


def test_the_document_is_one_line_as_the_file_exporter_writes_it() -> None:
    text = spans_to_otlp_json(run_spans(gated_run()))
    assert "\n" not in text


@pytest.mark.parametrize("make", [gated_run, every_kind_run])
def test_a_trace_reads_back_into_the_run_it_came_from(make: Any) -> None:
    result = make()
    back = trace_to_run(spans_to_otlp_json(run_spans(result)))
    assert back.state.observations == result.state.observations
    assert back.state.prompt_token_log == result.state.prompt_token_log
    assert (back.stop, back.answer, back.state.turns) == (
        result.stop, result.answer, result.state.turns)


def test_the_explorer_opens_a_trace_with_the_environments_effect_log() -> None:
    tools, effects = make_environment()
    result = run_agent(TASK, overreaching_model(), tools, refund_gate)
    shown = explore_trace(spans_to_otlp_json(run_spans(result)), effects, Limits(), "t")
    assert isinstance(shown, RunExplorer)
    text = repr(shown)
    assert "refund exceeds automatic authority" in text and "refunded_cents" in text
    with pytest.raises(ValueError, match="receipts"):
        explore_trace(spans_to_otlp_json(run_spans(result)), effects * 2, Limits(), "t")


def test_a_run_that_never_called_a_tool_is_one_agent_and_one_chat_span() -> None:
    tools, _ = make_environment()
    result = run_agent(TASK, ScriptedModel(turns=[answer_message("hello")]), tools,
                       refund_gate)
    spans = run_spans(result)
    assert [s.name for s in spans] == ["invoke_agent refund desk", "chat"]
    assert spans[1].attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert trace_to_run(spans_to_otlp_json(spans)).answer == "hello"
