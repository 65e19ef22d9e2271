"""Assistant messages for the refund desk, shared by the tests of Chapter 2's loops."""

from typing import Any

from agentbook import tool_call_message

TASK = "Order A-17 arrived damaged. Please make this right."


def entry(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One entry of a message's tool_calls list."""
    return tool_call_message(call_id, name, arguments)["tool_calls"][0]


def refund(call_id: str, cents: int) -> dict[str, Any]:
    return entry(call_id, "refund_order", {"order_id": "A-17", "amount_cents": cents})


def message(*entries: dict[str, Any]) -> dict[str, Any]:
    """An assistant message proposing the given calls at once."""
    return {"role": "assistant", "content": None, "tool_calls": list(entries)}
