"""A judge stand-in for the tests: a chat-completions server on 127.0.0.1 that answers
Oloproof's judge prompt deterministically and COUNTS what it is asked.

The rubric names a word in single quotes (`PASS when the output says 'refund'.`): the verdict
passes when the prompt's Output holds that word. A rubric holding GARBAGE gets prose with no
verdict; one holding FENCED gets its verdict inside a ```json fence and a sentence.
`hold_for` makes each request wait (on a condition, with a timeout) until that many are in
flight, so `peak` shows how many the judge was sent at once.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOLD_TIMEOUT_S = 3.0


def sections(prompt: str) -> dict[str, str]:
    """The template's parts: rubric, input, expected, output."""
    found = re.search(r"Rubric:\n(.*)\n\nInput:\n(.*)\n\nExpected:\n(.*)\n\nOutput:\n(.*)\n\nReturn exactly:", prompt, re.S)
    if found is None:
        raise ValueError("not Oloproof's judge prompt")
    return dict(zip(("rubric", "input", "expected", "output"), found.groups()))


def answer(prompt: str) -> str:
    parts = sections(prompt)
    if "GARBAGE" in parts["rubric"]:
        return "The assistant seems fine to me."
    word = re.search(r"'([^']+)'", parts["rubric"]).group(1)
    passed = word.lower() in parts["output"].lower()
    verdict = json.dumps({"pass": passed, "rationale": f"the output {'says' if passed else 'never says'} {word}"})
    return f"Here is my verdict:\n```json\n{verdict}\n```" if "FENCED" in parts["rubric"] else verdict


class JudgeStandIn:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []
        self.refuse_with: int | None = None
        self.hold_for = 0
        self.peak = 0
        self._in_flight = 0
        self._changed = threading.Condition()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stand_in.authorizations.append(self.headers.get("Authorization"))
                status, reply = stand_in.handle(body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def handle(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._changed:
            self.requests.append(body)
            self._in_flight += 1
            self.peak = max(self.peak, self._in_flight)
            self._changed.notify_all()
            self._changed.wait_for(lambda: self._in_flight >= self.hold_for, timeout=HOLD_TIMEOUT_S)
        try:
            if self.refuse_with is not None:
                return self.refuse_with, {"error": {"message": "refused by the stand-in"}}
            content = answer(body["messages"][-1]["content"])
            return 200, {
                "choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
            }
        finally:
            with self._changed:
                self._in_flight -= 1

    def rubrics(self) -> list[str]:
        """The rubric of each request, in order."""
        return [sections(body["messages"][-1]["content"])["rubric"] for body in self.requests]

    def start(self) -> "JudgeStandIn":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
