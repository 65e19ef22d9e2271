# @save
import html
import json
import textwrap
from dataclasses import dataclass
from typing import Any

from agentbook import (
    Limits,
    Observation,
    RunResult,
    Stop,
    ToolCall,
    estimate_tokens,
    parse_tool_calls,
)

EXPLORER_FORMAT = "agentbook-run/1"
NOT_RUN = "not run"
# What each observation kind says about the gate, for a reader: the gate
# only records a reason when it refuses, so the other kinds are explained
# by what the harness did with the call.
VERDICTS = {
    "result": ("allowed", "the gate allowed it and the handler ran"),
    "error": ("error", "the gate allowed it; the handler failed"),
    "invalid": ("invalid", "malformed, so it never reached the gate"),
    "denied": ("denied", "the gate refused it"),
}


def _why_stopped(stop: Stop, limits: Limits) -> str:
    """The loop's reason for a stop, in the words of the limit it enforced."""
    return {
        Stop.ANSWERED: "the model replied without proposing a call",
        Stop.STEP_LIMIT: f"it made max_turns={limits.max_turns} model calls",
        Stop.TOKEN_LIMIT: "the next prompt would exceed "
                          f"max_prompt_tokens={limits.max_prompt_tokens}",
        Stop.NO_PROGRESS: "the same proposal was denied "
                          f"{limits.repeated_denials} times",
    }[stop]


def _display(value: Any) -> str:
    """Show a value as the model reads it: strings bare, the rest as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _plain(value: Any) -> Any:
    """``value`` as plain JSON data, whatever Python objects it held."""
    return json.loads(json.dumps(value, default=str))


def _proposal(call: ToolCall, seen: Observation | None,
              landed: bool) -> dict[str, Any]:
    """One proposal, its verdict and reason, and what the model read back."""
    arguments = None if call.arguments is None else json.dumps(call.arguments)
    entry: dict[str, Any] = {"call_id": call.call_id, "tool": call.name,
                             "arguments": arguments, "landed": landed}
    if seen is None:  # the run stopped before the loop reached this call
        reason = "the run stopped before this call was tried"
        return {**entry, "verdict": NOT_RUN, "kind": None,
                "reason": reason, "observation": None}
    verdict, why = VERDICTS.get(seen.kind, (seen.kind, seen.kind))
    content = _plain(seen.content)
    # A refusal's reason is the observation itself; say it once, in full.
    reason = why if seen.ok or seen.kind == "error" else _display(content)
    return {**entry, "verdict": verdict, "kind": seen.kind,
            "reason": reason, "observation": content}


def _landed_flags(observations: list[Observation],
                  effects: list[dict[str, Any]]) -> list[bool]:
    """Which observations put a receipt in the effect log, in order.

    A handler that writes returns the receipt it appended, so the k-th
    receipt is the content of the first ``ok`` observation after the
    (k-1)-th one whose content equals it.
    """
    flags, matched = [], 0
    for seen in observations:
        hit = (seen.ok and matched < len(effects)
               and seen.content == effects[matched])
        flags.append(bool(hit))
        matched += bool(hit)
    if matched != len(effects):
        raise ValueError(
            f"the effect log holds {len(effects)} receipts but only "
            f"{matched} match this run's allowed calls; pass the effect "
            "log of the environment the run used")
    return flags


def _check_inputs(result: Any, effects: Any, limits: Any,
                  title: Any) -> None:
    """Refuse arguments of the wrong kind with a message that says which."""
    if not isinstance(result, RunResult):
        raise TypeError(f"result must be a RunResult, got "
                        f"{type(result).__name__}")
    if not isinstance(effects, list):
        raise TypeError(f"effects must be a list, got "
                        f"{type(effects).__name__}")
    if not isinstance(limits, Limits):
        raise TypeError(f"limits must be Limits, got "
                        f"{type(limits).__name__}")
    if not isinstance(title, str) or not title.strip():
        raise ValueError("title must be a non-empty string")


def _steps(result: RunResult,
           effects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One step per model call: its message, proposals and effects so far."""
    state = result.state
    flags = _landed_flags(state.observations, effects)
    replies = [m for m in state.messages if m.get("role") == "assistant"]
    if len(replies) != len(state.prompt_token_log):
        raise ValueError(
            f"the run has {len(replies)} model replies but "
            f"{len(state.prompt_token_log)} prompt estimates")
    steps, cursor, landed = [], 0, 0
    for number, (reply, tokens) in enumerate(
            zip(replies, state.prompt_token_log, strict=True), start=1):
        proposals = []
        for call in parse_tool_calls(reply):
            seen = None
            if (cursor < len(state.observations)
                    and state.observations[cursor].call_id == call.call_id):
                seen, cursor = state.observations[cursor], cursor + 1
            hit = seen is not None and flags[cursor - 1]
            landed += hit
            proposals.append(_proposal(call, seen, hit))
        content = reply.get("content")
        steps.append({"number": number, "prompt_tokens": tokens,
                      "message": None if content is None else
                      _display(content),
                      "proposals": proposals,
                      "effects": _plain(effects[:landed])})
    if cursor != len(state.observations):
        raise ValueError("the observations do not follow the proposals "
                         "in the transcript, in order")
    return steps


def run_to_explorer_json(result: RunResult, effects: list[dict[str, Any]],
                         limits: Limits, title: str) -> str:
    """Export a finished run as JSON the book's run explorer steps through.

    There is one step per model call: the assistant message, each proposal
    with the gate's verdict and reason and the observation it produced,
    the effect log as it stood after the step, and the prompt-token
    estimate of that call. The ending says how the run stopped; after a
    ``token_limit`` stop it also gives the estimate of the prompt that was
    never sent. Keys are sorted and separators fixed, so one run always
    gives the same bytes.
    """
    _check_inputs(result, effects, limits, title)
    state = result.state
    task = next((m.get("content") for m in state.messages
                 if m.get("role") == "user"), None)
    unsent = (estimate_tokens(state.messages)
              if result.stop == Stop.TOKEN_LIMIT else None)
    data = {
        "format": EXPLORER_FORMAT,
        "title": title,
        "task": None if task is None else _display(task),
        "limits": {"max_turns": limits.max_turns,
                   "max_prompt_tokens": limits.max_prompt_tokens,
                   "repeated_denials": limits.repeated_denials},
        "steps": _steps(result, effects),
        "ending": {"stop": str(result.stop), "turns": state.turns,
                   "why": _why_stopped(result.stop, limits),
                   "answer": None if result.answer is None else
                   _display(result.answer),
                   "unsent_prompt_tokens": unsent,
                   "effects": _plain(effects)},
    }
    return json.dumps(data, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True)


def _wrapped(text: str, indent: int) -> list[str]:
    """``text`` as lines of at most 79 characters, continued deeper."""
    return textwrap.wrap(text, width=79, initial_indent=" " * indent,
                         subsequent_indent=" " * (indent + 4),
                         break_on_hyphens=False) or [" " * indent]


def _proposal_lines(proposal: dict[str, Any]) -> list[str]:
    """A proposal, its verdict and reason, and the observation if new."""
    name = proposal["tool"] or "(no tool name)"
    arguments = proposal["arguments"] or "(arguments unreadable)"
    lines = _wrapped(f"-> {name} {arguments}", 2)
    lines += _wrapped(f"{proposal['verdict']}: {proposal['reason']}", 5)
    shown = proposal["observation"]
    if shown is not None and _display(shown) != proposal["reason"]:
        lines += _wrapped(f"observation: {_display(shown)}", 5)
    return lines


def _effect_lines(effects: list[Any]) -> list[str]:
    """The effect log, one receipt a line, or a word saying it is empty."""
    if not effects:
        return ["  effect log: (empty)"]
    lines = ["  effect log:"]
    for receipt in effects:
        lines += _wrapped(_display(receipt), 4)
    return lines


def _step_lines(step: dict[str, Any], total: int, budget: int) -> list[str]:
    """The readable form of one model call."""
    head = (f"step {step['number']} of {total}: prompt "
            f"{step['prompt_tokens']} of {budget} tokens")
    message = step["message"] or "(no text, tool calls only)"
    lines = ["", head, *_wrapped(f"model: {message}", 2)]
    for proposal in step["proposals"]:
        lines += _proposal_lines(proposal)
    return lines + _effect_lines(step["effects"])


def _ending_lines(ending: dict[str, Any], budget: int) -> list[str]:
    """How the run ended, the answer, and the prompt that was not sent."""
    lines = ["", f"ending: {ending['stop']} after {ending['turns']} "
             "model calls", *_wrapped(f"why: {ending['why']}", 2)]
    if ending["answer"] is not None:
        lines += _wrapped(f"answer: {ending['answer']}", 2)
    if ending["unsent_prompt_tokens"] is not None:
        lines.append(f"  next prompt: {ending['unsent_prompt_tokens']} of "
                     f"{budget} tokens, not sent")
    return lines + _effect_lines(ending["effects"])


def explorer_transcript(exported: str) -> str:
    """The run as readable text, every line at most 79 characters.

    It is built from the exported JSON, so the text and the explorer can
    never disagree about the run.
    """
    data = json.loads(exported)
    budget = data["limits"]["max_prompt_tokens"]
    lines = [*_wrapped(data["title"], 0),
             *_wrapped(f"task: {data['task']}", 0),
             f"limits: max_turns={data['limits']['max_turns']}, "
             f"max_prompt_tokens={budget}"]
    for step in data["steps"]:
        lines += _step_lines(step, len(data["steps"]), budget)
    return "\n".join(lines + _ending_lines(data["ending"], budget))


@dataclass(frozen=True)
class RunExplorer:
    """A run shown step by step in the rendered book, as text elsewhere.

    The HTML carries the run's JSON for the book's explorer script and the
    readable transcript, which is what a notebook shows where that script
    does not run (JupyterLab, Colab, a browser with scripts off).
    """

    exported: str

    def __repr__(self) -> str:
        return explorer_transcript(self.exported)

    def _repr_html_(self) -> str:
        # Escaped so that no "</script>" inside the data can end the block;
        # the escapes are still JSON, and decode to the same text.
        payload = (self.exported.replace("&", "\\u0026")
                   .replace("<", "\\u003c").replace(">", "\\u003e"))
        transcript = html.escape(explorer_transcript(self.exported))
        return (
            '<div class="run-explorer">\n'
            '<script type="application/json" class="run-explorer-data">'
            f"{payload}</script>\n"
            f'<pre class="run-explorer-transcript">{transcript}</pre>\n'
            "</div>")


def explore_run(result: RunResult, effects: list[dict[str, Any]],
                limits: Limits, title: str) -> RunExplorer:
    """Show a finished run so a reader can step through it, turn by turn."""
    return RunExplorer(run_to_explorer_json(result, effects, limits, title))
