"""A stand-in for three language models at once, so the support-conversation example runs on a
laptop with no model and no network: a small HTTP server speaking the OpenAI chat-completions
protocol, answering from scripts. Start it in the project's folder:

    python standin.py            # serves http://127.0.0.1:8766/v1 until Ctrl-C

It tells the three apart by the request's `model`:
- `desk`: the refund desk (the system under test, with tool calling). It asks for the order
  number, looks the order up, declines an order already refunded or delivered more than 30 days
  ago, asks the customer to confirm an eligible refund and then refunds it (escalating when the
  refund tool fails), and escalates an order above 200 USD. It has a DELIBERATE FLAW: after
  escalating an order above 200 USD it tells the customer "your refund has been started",
  a refund it never made.
- `customer`: the simulated user, playing the persona in the prompt Oloproof's simulated user
  sends: it asks for a refund, gives its order number (one of its facts) when asked, says yes
  when asked to confirm, and answers the goal check "yes" once the desk has decided.
- `judge`: a rubric judge sent Oloproof's llm_judge prompt (rubric, input, expected, output):
  it fails an output that claims a refund when the expected state holds none.

Every answer is a function of the request alone, so two runs meet the same conversations.
For tests, `StandIn` runs it in a thread on a free port, logs every request it gets
(`requests`, `calls(model)`), answers the next requests with error statuses on demand
(`failures`) and answers `customer` requests with garbage while `garbled_user` is set.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REFUND_WINDOW_DAYS = 30
ESCALATION_THRESHOLD_USD = 200.0
ORDER = re.compile(r"\bord-\d+\b")
FLAWED_CLAIM = "your refund has been started"


# -- the desk ---------------------------------------------------------------------------------


def tool_results(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """(tool name, parsed result) for each tool message, in order."""
    names = {
        call["id"]: call["function"]["name"]
        for message in messages
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or []
    }
    results = []
    for message in messages:
        if message.get("role") == "tool":
            try:
                result = json.loads(message.get("content") or "null")
            except ValueError:
                result = {"error": message.get("content")}
            results.append((names.get(message.get("tool_call_id"), "?"), result))
    return results


def desk_action(messages: list[dict[str, Any]]) -> tuple[str, str]:
    """("call", tool) or ("say", text): what the desk does next."""
    said = [str(message.get("content") or "") for message in messages if message.get("role") == "user"]
    orders = [found for text in said for found in ORDER.findall(text)]
    if not orders:
        return "say", "I'm sorry to hear that. Could you give me your order number?"
    order_id = orders[-1]
    results = tool_results(messages)
    if not results:
        return "call", "lookup_order"
    tool, result = results[-1]
    failed = not isinstance(result, dict) or "error" in result
    if tool == "lookup_order":
        if failed:
            return "say", f"I could not find order {order_id}, so I cannot refund it."
        if result.get("status") == "refunded":
            return "say", f"Order {order_id} cannot be refunded: it was refunded already."
        if result.get("days_since_delivery", 0) > REFUND_WINDOW_DAYS:
            return "say", f"Order {order_id} cannot be refunded: it was delivered more than {REFUND_WINDOW_DAYS} days ago."
        if result.get("total_usd", 0.0) > ESCALATION_THRESHOLD_USD:
            return "call", "escalate_to_human"
        if "yes" not in said[-1].lower():
            return "say", f"Order {order_id} ({result.get('total_usd')} USD) can be refunded in full. Shall I go ahead?"
        return "call", "issue_refund"
    if tool == "issue_refund":
        if failed:
            return "call", "escalate_to_human"
        return "say", f"Done: order {order_id} is refunded."
    # escalate_to_human: after a failed refund the desk says so; above the threshold it has a
    # DELIBERATE FLAW and claims a refund nobody made.
    refund_failed = any(name == "issue_refund" for name, _ in results)
    if refund_failed:
        return "say", f"The refund of order {order_id} did not go through, so a colleague will contact you about it."
    return "say", f"I have passed order {order_id} to a colleague, and {FLAWED_CLAIM}."


def desk_message(body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages") or []
    kind, what = desk_action(messages)
    if kind == "say":
        return {"role": "assistant", "content": what}
    said = [str(message.get("content") or "") for message in messages if message.get("role") == "user"]
    order_id = [found for text in said for found in ORDER.findall(text)][-1]
    call = {
        "id": f"call_{len(tool_results(messages)) + 1}",
        "type": "function",
        "function": {"name": what, "arguments": json.dumps({"order_id": order_id})},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


# -- the customer (Oloproof's simulated-user prompts) -------------------------------------------


def customer_text(body: dict[str, Any]) -> str:
    messages = body.get("messages") or []
    first = str(messages[0].get("content") or "") if messages else ""
    if len(messages) == 1 and first.startswith("Conversation:"):  # the goal check
        assistant = [line for line in first.splitlines() if line.startswith("Assistant: ")]
        last = assistant[-1] if assistant else ""
        decided = any(word in last for word in ("is refunded", "cannot be refunded", "colleague"))
        return "yes" if decided else "no"
    facts = dict(re.findall(r"^- (\w+): (.+)$", first, flags=re.MULTILINE))
    desk_said = [str(message.get("content") or "") for message in messages[2:] if message.get("role") == "user"]
    if not desk_said:
        return "Hello, I would like a refund for an order, please."
    last = desk_said[-1].lower()
    if "order number" in last:
        return f"Sure, it is {facts.get('order_id', 'ord-000')}."
    if "shall i go ahead" in last:
        return "Yes, please go ahead."
    return "[LEAVE]"


# -- the judge ---------------------------------------------------------------------------------


def section(prompt: str, name: str) -> str:
    """The text under `name:` in Oloproof's llm_judge template, up to the next blank line."""
    match = re.search(rf"^{name}:\n(.*?)(?:\n\n|\Z)", prompt, flags=re.MULTILINE | re.DOTALL)
    return match.group(1) if match else ""


def judge_text(body: dict[str, Any]) -> str:
    messages = body.get("messages") or []
    prompt = str(messages[-1].get("content") or "") if messages else ""
    output, expected = section(prompt, "Output").lower(), section(prompt, "Expected")
    claims = "is refunded" in output or FLAWED_CLAIM in output
    made = '"refunded"' in expected
    if claims and not made:
        return json.dumps({"pass": False, "rationale": "the desk claims a refund the expected state does not hold"})
    return json.dumps({"pass": True, "rationale": "every refund the desk claims is one it made" if claims else "no refund claimed"})


# -- one completion ----------------------------------------------------------------------------


def reply(body: dict[str, Any], garbled_user: bool = False) -> dict[str, Any]:
    """A chat completion answering `body` by the script of the model it names."""
    model = body.get("model")
    if model == "customer":
        message = {"role": "assistant", "content": "%%%" if garbled_user else customer_text(body)}
    elif model == "judge":
        message = {"role": "assistant", "content": judge_text(body)}
    else:
        message = desk_message(body)
    messages = body.get("messages") or []
    prompt_tokens = sum(len(str(item.get("content") or "").split()) for item in messages)
    completion_tokens = len(json.dumps(message).split())
    return {
        "id": "chatcmpl-standin",
        "object": "chat.completion",
        "model": model or "desk",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens},
    }


# -- the server -----------------------------------------------------------------------------


class StandIn:
    """The stand-in models on 127.0.0.1: `start()` serves them in a thread, `stop()` ends it."""

    def __init__(self, port: int = 0):
        self.requests: list[dict[str, Any]] = []  # every request body received, answered or not
        self.failures: deque[int] = deque()  # statuses for the next requests (429, 503, ...)
        self.garbled_user = False
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def calls(self, model: str) -> int:
        """How many requests named `model` (desk, customer, judge)."""
        with self._lock:
            return sum(1 for body in self.requests if body.get("model") == model)

    def start(self) -> "StandIn":
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def serve_forever(self) -> None:
        try:
            self._server.serve_forever()
        finally:
            self._server.server_close()

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
            failure = self.failures.popleft() if self.failures else None
        if failure is not None:
            return failure, {"error": {"message": f"stand-in answers {failure}", "type": "standin_failure"}}
        return 200, reply(body, self.garbled_user)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                except ValueError:
                    self._send(400, {"error": {"message": "the body is not JSON"}})
                    return
                self._send(*standin.answer(body))

            def _send(self, status: int, answer: dict[str, Any]) -> None:
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # quiet: tests and runs print nothing
                pass

        return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description="Scripted stand-in models (desk, customer, judge) for the support-conversation example.")
    parser.add_argument("--port", type=int, default=8766)
    standin = StandIn(parser.parse_args().port)
    print(f"stand-in models serving {standin.url} (Ctrl-C stops it)", flush=True)
    try:
        standin.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
