"""The refund desk's tools for the support-conversation example: the state they work on, what each does,
and the JSON schema the model is shown for each. There is no agent code here: with
`system.kind: chat_agent` the pipeline runs the loop (prompt, model, tool calls) itself, and
dispatches every call through the tool box, so the runner records calls, checkpoints and
the state after, and fault replays work.
"""

from __future__ import annotations

import copy
from typing import Any

ORDER_ID = {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}


class RefundTools:
    tool_schemas = {
        "lookup_order": {"description": "Look an order up: status, total_usd, days_since_delivery.", "parameters": ORDER_ID},
        "issue_refund": {"description": "Refund an order in full.", "parameters": ORDER_ID},
        "escalate_to_human": {"description": "Hand the order to a person to decide.", "parameters": ORDER_ID},
    }

    def __init__(self) -> None:
        self._store: dict[str, Any] = {"orders": {}}

    # -- the sandbox: the runner resets it before each case and reads it after ----------

    def reset(self, state: dict[str, Any]) -> None:
        self._store = state  # the runner hands over its own deep copy

    def snapshot(self) -> dict[str, Any]:
        return copy.deepcopy(self._store)

    # -- tools ---------------------------------------------------------------------------

    def lookup_order(self, order_id: str) -> dict[str, Any]:
        order = self._store["orders"].get(order_id)
        return copy.deepcopy(order) if order is not None else {"error": "order not found"}

    def issue_refund(self, order_id: str) -> dict[str, Any]:
        order = self._store["orders"].get(order_id)
        if order is None:
            return {"error": "order not found"}
        order["status"] = "refunded"
        return {"status": "refunded", "order_id": order_id}

    def escalate_to_human(self, order_id: str) -> dict[str, Any]:
        order = self._store["orders"].get(order_id)
        if order is None:
            return {"error": "order not found"}
        order["escalated"] = True
        return {"status": "escalated", "order_id": order_id}
