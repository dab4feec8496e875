"""An OpenAI-compatible chat-completions endpoint: the one client the system's model turns, a
simulated user's and a judge's requests all go through.

Each request goes through the process's limiter for its endpoint (`limiter.py`), is tried
again with backoff on what may pass (connection refused, 429, 5xx, a timeout), and respects
the calling case's deadline when there is one (`deadline.py`). An answer that is not a chat
completion, or no answer after the retries allowed, is `ModelUnavailable`: the caller's case
(or judgment) is an error, never a pass.
"""

from __future__ import annotations

import os
import threading
import time
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..model.config import ChatModelConfig
from ..model.errors import ProjectError
from .deadline import check_deadline, remaining_s
from .ledger import Ledger
from .limiter import endpoint_limiter

if TYPE_CHECKING:
    import httpx

# Waits between tries double from `backoff_s`, never beyond this (nor beyond a Retry-After under it).
MAX_BACKOFF_S = 30.0
SHOWN_BODY_CHARS = 200
# A Retry-After on these pauses every request to the endpoint, not only the one refused.
PAUSING_STATUSES = (429, 503)


class ModelUnavailable(Exception):
    """The endpoint gave no usable answer, after the retries allowed: the case is an error."""


# -- the endpoint -----------------------------------------------------------------------------


def is_retryable(status_code: int) -> bool:
    return status_code == 429 or status_code >= 500


def retry_after_s(response: httpx.Response) -> float | None:
    try:
        return float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None


class ChatModel:
    """An OpenAI-compatible chat-completions endpoint, called through httpx, each request
    through the process's limiter for that endpoint (endpoints/limiter.py)."""

    def __init__(
        self, config: ChatModelConfig, api_key: str | None, requests_at_once: int = 1, *, ledger: Ledger | None = None
    ):
        self.config = config
        self.url = config.base_url.rstrip("/") + "/chat/completions"
        self._client = shared_client(api_key, requests_at_once)
        self._transport_error = _httpx().TransportError  # refused, reset, timed out
        self._limiter = endpoint_limiter(config.base_url, requests_at_once)
        # The run's budget: each request is charged before it is sent (BudgetStop once spent).
        self._ledger = ledger

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """The turn the model answers `body` with: its message, finish reason, token usage,
        latency (all tries and their backoff, never the limiter's waits) and how many tries
        it took."""
        started = time.perf_counter()
        limited_s = 0.0
        problem, wait_hint = "", None
        tries = self.config.retries + 1
        for attempt in range(tries):
            if attempt:
                sleep_within_deadline(self._backoff(attempt, wait_hint))
            try:
                with self._limiter.slot() as waited_s:
                    limited_s += waited_s
                    self._charge()
                    response = self._client.post(self.url, json=body, timeout=self._request_timeout())
            except self._transport_error as error:
                self._settle(None)  # it may have been answered and billed: nothing says what it cost
                check_deadline()  # a request cut short by the case's deadline is a timeout
                problem, wait_hint = f"{type(error).__name__}: {error or 'no answer'}", None
                continue
            if response.is_error:  # refused before any completion: no tokens
                self._settle({"prompt_tokens": 0, "completion_tokens": 0})
            if is_retryable(response.status_code):
                problem, wait_hint = f"HTTP {response.status_code}: {response.text[:SHOWN_BODY_CHARS]}", retry_after_s(response)
                if wait_hint is not None and response.status_code in PAUSING_STATUSES:
                    self._limiter.pause(min(wait_hint, MAX_BACKOFF_S))  # every request to this endpoint waits
                continue
            if response.is_error:  # a request the endpoint will never accept: no point trying again
                raise ModelUnavailable(f"{self.url} refused the request: HTTP {response.status_code}: {response.text[:SHOWN_BODY_CHARS]}")
            latency_s = time.perf_counter() - started - limited_s
            try:
                turn = completion_turn(response, self.url)
            except ModelUnavailable:
                self._settle(None)
                raise
            self._settle(turn["usage"])
            return {**turn, "latency_s": round(latency_s, 6), "attempts": attempt + 1}
        raise ModelUnavailable(f"{self.url} failed {tries} time(s); the last: {problem}")

    def _charge(self) -> None:
        if self._ledger is not None:
            self._ledger.charge_request()

    def _settle(self, usage: dict[str, Any] | None) -> None:
        if self._ledger is not None:
            self._ledger.settle_request(usage)

    def _request_timeout(self) -> float:
        """The request's timeout, never beyond what is left of the case's checked deadline."""
        left = remaining_s()
        timeout = self.config.request_timeout_s
        if left is None:
            return timeout
        check_deadline()
        return max(0.001, min(timeout, left))

    def _backoff(self, attempt: int, hint: float | None) -> float:
        wait = self.config.backoff_s * 2 ** (attempt - 1)
        if hint is not None:
            wait = max(wait, hint)
        return min(wait, MAX_BACKOFF_S)


_clients: dict[tuple[str | None, int], httpx.Client] = {}
_clients_lock = threading.Lock()


def _httpx() -> ModuleType:
    """httpx, imported with the process's first client: a project that asks no model (nor a
    process that only names this client, as a run's launch does) never pays for its import."""
    import httpx

    return httpx


def shared_client(api_key: str | None, requests_at_once: int) -> httpx.Client:
    """One HTTP client per key in the process, shared by the cases side by side (httpx's
    client is thread-safe; making one costs an SSL context): its connections are not what
    bounds the requests in flight, the limiter is."""
    with _clients_lock:
        if (api_key, requests_at_once) not in _clients:
            http = _httpx()
            headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
            limits = http.Limits(max_connections=None, max_keepalive_connections=requests_at_once)
            _clients[api_key, requests_at_once] = http.Client(headers=headers, limits=limits)
        return _clients[api_key, requests_at_once]


def sleep_within_deadline(seconds: float) -> None:
    """Sleep, but no later than the case's checked deadline (then CaseTimedOut)."""
    left = remaining_s()
    time.sleep(seconds if left is None else max(0.0, min(seconds, left)))
    check_deadline()


def completion_turn(response: httpx.Response, url: str) -> dict[str, Any]:
    """The first choice's message, finish reason and usage of a chat completion."""
    try:
        data = response.json()
        choice = data["choices"][0]
        message = choice["message"]
        if not isinstance(message, dict):
            raise TypeError("message is not an object")
    except (ValueError, KeyError, IndexError, TypeError) as error:
        raise ModelUnavailable(f"{url} answered with no chat completion ({type(error).__name__}: {error})") from None
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return {
        "message": sent_message(message),
        "finish_reason": choice.get("finish_reason"),
        "usage": {key: usage.get(key) for key in ("prompt_tokens", "completion_tokens", "total_tokens")},
    }


def sent_message(message: dict[str, Any]) -> dict[str, Any]:
    """The assistant's message as it goes back to the model in the next request (the same
    text whether it came live or from a recording, so the requests that follow match)."""
    sent: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    calls = message.get("tool_calls") or []
    if calls:
        sent["tool_calls"] = [
            {
                "id": call.get("id"),
                "type": "function",
                "function": {
                    "name": (call.get("function") or {}).get("name"),
                    "arguments": (call.get("function") or {}).get("arguments") or "{}",
                },
            }
            for call in calls
        ]
    return sent


def api_key(config: ChatModelConfig, where: str) -> str | None:
    if config.api_key_env is None:
        return None
    key = os.environ.get(config.api_key_env)
    if not key:
        raise ProjectError(f"{where}: the environment variable {config.api_key_env} is not set")
    return key
