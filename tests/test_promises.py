"""The kernel keeps its promises against odd models, forged records and odd replies.

Each test names the promise it holds the kernel to: a failed model call keeps
its run, the model cannot touch the record, a reply JSON cannot carry moves no
money, a forged or edited record is flagged, and a finished run stays finished.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentbook import (
    Limits,
    Stop,
    check_run,
    make_environment,
    overreaching_model,
    refund_gate,
    resume_agent,
    run_agent,
    state_from_json,
    state_to_json,
)

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
