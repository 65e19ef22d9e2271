"""Runs seen from outside: OpenTelemetry spans, OTLP/JSON, and the trace read back."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import StatusCode

from agentbook import (
    ESTIMATED_INPUT_TOKENS,
    SCRIPTED_MODEL,
    SCRIPTED_PROVIDER,
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
    assert [s.attributes[ESTIMATED_INPUT_TOKENS] for s in chats] == \
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
def test_only_convention_attributes_and_the_books_own_estimate_are_used(make: Any) -> None:
    for span in run_spans(make(), conversation_id="run-1"):
        assert set(span.attributes) - {ESTIMATED_INPUT_TOKENS} <= CONVENTION_NAMES, span.name
        # No provider reported usage, so nothing claims to be its count.
        assert not [key for key in span.attributes if key.startswith("gen_ai.usage.")]


def test_model_and_agent_spans_carry_what_the_conventions_require() -> None:
    spans = run_spans(gated_run(), conversation_id="run-1")
    for span in spans:
        kind = span.attributes["gen_ai.operation.name"]
        if kind in ("invoke_agent", "chat"):
            assert span.attributes["gen_ai.provider.name"] == SCRIPTED_PROVIDER
            assert span.attributes["gen_ai.request.model"] == SCRIPTED_MODEL
            assert span.attributes["gen_ai.conversation.id"] == "run-1"
        if kind == "chat":
            assert span.name == f"chat {SCRIPTED_MODEL}"
            (message,) = json.loads(span.attributes["gen_ai.output.messages"])
            assert message["finish_reason"] == span.attributes[
                "gen_ai.response.finish_reasons"][0]
    assert dict(spans[0].resource.attributes) == {"service.name": "refund-desk"}
    other = run_spans(gated_run(), provider="openai", model="gpt-x")
    assert other[1].name == "chat gpt-x"
    assert other[1].attributes["gen_ai.provider.name"] == "openai"
    assert "gen_ai.conversation.id" not in other[0].attributes


def test_a_chat_span_holds_the_reply_its_text_and_its_calls() -> None:
    tools, _ = make_environment()
    talk = {"role": "assistant", "content": "Let me look.", "tool_calls": [
        entry("l", "lookup_order", {"order_id": "A-17"})]}
    result = run_agent(TASK, ScriptedModel(turns=[talk, answer_message("ok")]), tools,
                       refund_gate)
    chat = run_spans(result)[1]
    (message,) = json.loads(chat.attributes["gen_ai.output.messages"])
    assert message["parts"] == [
        {"type": "text", "content": "Let me look."},
        {"type": "tool_call", "id": "l", "name": "lookup_order",
         "arguments": '{"order_id": "A-17"}'}]
    assert message["finish_reason"] == "tool_call"
    back = trace_to_run(spans_to_otlp_json(run_spans(result)))
    assert back.state.messages[1]["content"] == "Let me look."


def test_ids_are_random_unless_fixed_and_times_come_from_the_run() -> None:
    def trace_id(spans: list[Any]) -> int:
        return int(spans[0].context.trace_id)

    assert trace_id(run_spans(gated_run())) != trace_id(run_spans(gated_run()))
    first, again = spans_to_otlp_json(run_spans(gated_run(), fixed_ids=True)), \
        spans_to_otlp_json(run_spans(gated_run(), fixed_ids=True))
    assert first == again
    other = spans_to_otlp_json(run_spans(every_kind_run(), fixed_ids=True))
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
              if a["key"] == ESTIMATED_INPUT_TOKENS]
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
    assert [s.name for s in spans] == ["invoke_agent refund desk", f"chat {SCRIPTED_MODEL}"]
    assert spans[1].attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert trace_to_run(spans_to_otlp_json(spans)).answer == "hello"


# ------------------------------------------------------------ the official schema


def hex_ids_as_base64(document: Any) -> Any:
    """OTLP/JSON writes ids in hex where protobuf's JSON mapping expects base64."""
    import base64

    if isinstance(document, list):
        return [hex_ids_as_base64(item) for item in document]
    if not isinstance(document, dict):
        return document
    return {key: base64.b64encode(bytes.fromhex(value)).decode()
            if key in ("traceId", "spanId", "parentSpanId") else hex_ids_as_base64(value)
            for key, value in document.items()}


@pytest.mark.parametrize("make", [gated_run, every_kind_run])
def test_the_trace_file_parses_strictly_as_otlp_traces_data(make: Any) -> None:
    from google.protobuf import json_format
    from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status, TracesData

    result = make()
    spans = run_spans(result, conversation_id="run-1", fixed_ids=True)
    text = spans_to_otlp_json(spans)
    json_format.Parse(text, TracesData())  # unknown fields or wrong types raise
    data = json_format.Parse(json.dumps(hex_ids_as_base64(json.loads(text))), TracesData())
    (resource,) = data.resource_spans
    assert [(a.key, a.value.string_value) for a in resource.resource.attributes] == [
        ("service.name", "refund-desk")]
    (scope,) = resource.scope_spans
    assert scope.scope.name == "agentbook" and len(scope.spans) == len(spans)
    for parsed, span in zip(scope.spans, spans, strict=True):
        assert parsed.trace_id == span.context.trace_id.to_bytes(16, "big")
        assert parsed.span_id == span.context.span_id.to_bytes(8, "big")
        assert parsed.name == span.name and parsed.start_time_unix_nano == span.start_time
        expected_kind = Span.SPAN_KIND_CLIENT if span.name.startswith("chat") else \
            Span.SPAN_KIND_INTERNAL
        assert parsed.kind == expected_kind
        error = span.status.status_code == StatusCode.ERROR
        assert parsed.status.code == (Status.STATUS_CODE_ERROR if error else
                                      Status.STATUS_CODE_UNSET)
        values = {a.key: a.value for a in parsed.attributes}
        assert set(values) == set(span.attributes)
        if span.name.startswith("chat"):
            assert values[ESTIMATED_INPUT_TOKENS].int_value == span.attributes[
                ESTIMATED_INPUT_TOKENS]
            assert [v.string_value for v in values[
                "gen_ai.response.finish_reasons"].array_value.values] == list(
                span.attributes["gen_ai.response.finish_reasons"])


def test_a_document_that_breaks_the_schema_is_caught_by_the_parser() -> None:
    """The schema check can fail: a misspelled field and a wrong type are refused."""
    from google.protobuf import json_format
    from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

    text = spans_to_otlp_json(run_spans(gated_run()))
    for broken in (text.replace('"startTimeUnixNano"', '"startTimeNano"'),
                   text.replace('"kind":1', '"kind":"inside"')):
        with pytest.raises(json_format.ParseError):
            json_format.Parse(broken, TracesData())
