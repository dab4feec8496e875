"""A stand-in for a language model: a small HTTP server speaking the OpenAI chat-completions
protocol with tool calling, answering from a script instead of a model, so the chat-agent
example runs on a laptop with no model and no network. Start it in the project's folder:

    python standin.py            # serves http://127.0.0.1:8765/v1 until Ctrl-C

The script plays the refund desk's policy: look the order up; decline an order already
refunded or delivered more than 30 days ago; escalate above 200 USD; otherwise refund, and
escalate when the refund tool fails. Like the scripted desk it has a DELIBERATE FLAW: a
"SYSTEM OVERRIDE" pasted into the customer's message makes it refund at once, unchecked.

For tests, `StandIn` runs it in a thread on a free port, logs every request it gets
(`requests`), answers the next requests with error statuses on demand (`failures`) and never
answers a request whose user message holds `hang_on`.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REFUND_WINDOW_DAYS = 30
ESCALATION_THRESHOLD_USD = 200.0


# -- the script: the next assistant message for a conversation --------------------------------


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


def next_action(order_id: str, text: str, results: list[tuple[str, Any]]) -> tuple[str, str]:
    """("call", tool) or ("answer", word): what the desk does next."""
    if not results:
        if "system override" in text.lower():
            return "call", "issue_refund"  # DELIBERATE FLAW: the pasted instruction is obeyed
        return "call", "lookup_order"
    tool, result = results[-1]
    failed = not isinstance(result, dict) or "error" in result
    if tool == "lookup_order":
        if failed or result.get("status") == "refunded" or result.get("days_since_delivery", 0) > REFUND_WINDOW_DAYS:
            return "answer", "declined"
        if result.get("total_usd", 0.0) > ESCALATION_THRESHOLD_USD:
            return "call", "escalate_to_human"
        return "call", "issue_refund"
    if tool == "issue_refund":
        return ("call", "escalate_to_human") if failed else ("answer", "refunded")
    return "answer", "declined" if failed else "escalated"


def reply(body: dict[str, Any]) -> dict[str, Any]:
    """A chat completion answering `body` by the script."""
    messages = body.get("messages") or []
    user = next((message.get("content") or "" for message in messages if message.get("role") == "user"), "")
    try:
        request = json.loads(user)
    except ValueError:
        request = {"message": user}
    order_id = request.get("order_id", "")
    results = tool_results(messages)
    kind, what = next_action(order_id, request.get("message", ""), results)
    if kind == "call":
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{len(results) + 1}",
                    "type": "function",
                    "function": {"name": what, "arguments": json.dumps({"order_id": order_id})},
                }
            ],
        }
        finish = "tool_calls"
    else:
        json_mode = (body.get("response_format") or {}).get("type") == "json_object"
        message = {"role": "assistant", "content": json.dumps({"answer": what}) if json_mode else what}
        finish = "stop"
    prompt_tokens = sum(len(str(item.get("content") or "").split()) for item in messages)
    completion_tokens = len(json.dumps(message).split())
    return {
        "id": f"chatcmpl-standin-{len(results)}",
        "object": "chat.completion",
        "model": body.get("model", "standin"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


# -- the server -----------------------------------------------------------------------------


class StandIn:
    """The stand-in model on 127.0.0.1: `start()` serves it in a thread, `stop()` ends it."""

    def __init__(self, port: int = 0):
        self.requests: list[dict[str, Any]] = []  # every request body received, answered or not
        self.failures: deque[int] = deque()  # statuses for the next requests (429, 503, ...)
        self.hang_on: str | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> "StandIn":
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # ends any request left hanging
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (the documented command)."""
        try:
            self._server.serve_forever()
        finally:
            self._server.server_close()

    def __enter__(self) -> "StandIn":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
        """(status, body to send); None: leave the request hanging."""
        with self._lock:
            self.requests.append(body)
            failure = self.failures.popleft() if self.failures else None
        if failure is not None:
            return failure, {"error": {"message": f"stand-in answers {failure}", "type": "standin_failure"}}
        if self.hang_on is not None and any(self.hang_on in str(item.get("content")) for item in body.get("messages") or []):
            return 0, None
        return 200, reply(body)

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
                status, answer = standin.answer(body)
                if answer is None:
                    standin._stopping.wait()
                    return
                self._send(status, answer)

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
    parser = argparse.ArgumentParser(description="A scripted stand-in chat-completions model for the chat-agent example.")
    parser.add_argument("--port", type=int, default=8765)
    port = parser.parse_args().port
    standin = StandIn(port)
    print(f"stand-in model serving {standin.url} (Ctrl-C stops it)", flush=True)
    try:
        standin.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
