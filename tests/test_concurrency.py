"""`concurrency: {system: N}` for a chat agent, and the one limiter per endpoint, against a
stand-in model on 127.0.0.1 started by each test (the example's scripted answers, served by a
server of this file's that counts what is in flight and logs when each request came). Every
assertion is a count or an order on the stand-in's own log, never a timing of ours."""

from __future__ import annotations

import json
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from oloproof_pipeline.evaluators.judging import judge_cases
from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.project import load_project
from oloproof_pipeline.run.recording import record_cases

from test_chat_agent import EXAMPLE, VERSION, load_standin_module

REPLY = load_standin_module().reply
# The stand-in holds the first requests until this many are in flight (or this long passed):
# long enough for a loaded machine to start every case, and spent only by a run that is wrong.
HOLD_TIMEOUT_S = 30.0


class CountingStandIn:
    """The example's scripted model answering after `latency_s`, counting the requests in
    flight (`peak`), logging (arrival time, status) per request on time.monotonic(), the
    clock every process on the machine shares; `gather` holds the first requests until that
    many are in at once; `refuse_at` answers the request of that index 429, Retry-After 1."""

    def __init__(self, *, latency_s: float = 0.0, gather: int = 0, refuse_at: int | None = None):
        self.latency_s = latency_s
        self.gather = gather
        self.refuse_at = refuse_at
        self.in_flight = 0
        self.peak = 0
        self.log: list[tuple[float, int]] = []  # (arrived, status), in arrival order
        self.answered: list[float] = []  # when each 200 went out
        self._lock = threading.Lock()
        self._gathered = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> "CountingStandIn":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._gathered.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self._lock:
            index = len(self.log)
            refused = index == self.refuse_at
            self.log.append((time.monotonic(), 429 if refused else 200))
            if refused:
                self._gathered.set()  # the requests held so far go on, answered during the pause
                return 429, {"error": {"message": "slow down"}}, {"Retry-After": "1"}
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            if self.in_flight >= self.gather:
                self._gathered.set()
        try:
            self._gathered.wait(HOLD_TIMEOUT_S)  # bounded: a run that never gathers still ends
            time.sleep(self.latency_s)
            with self._lock:
                self.answered.append(time.monotonic())
            return 200, REPLY(body), {}
        finally:
            with self._lock:
                self.in_flight -= 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                status, answer, headers = standin.answer(body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", "Content-Length": str(len(data)), **headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


SOURCES = [f"ord-{number:03d}" for number in (1, 2, 5, 6, 9, 10, 13, 14)]


@pytest.fixture
def chat_desk(tmp_path: Path) -> Path:
    target = tmp_path / "chat_desk"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns(".oloproof", "__pycache__"))
    data = target / "data" / "cases.jsonl"
    kept = [line for line in data.read_text().splitlines() if json.loads(line)["id"] in SOURCES]
    data.write_text("\n".join(kept) + "\n")
    return target


def configure(root: Path, url: str, concurrency: Any, **model: Any) -> None:
    config = yaml.safe_load((root / "oloproof.yaml").read_text())
    config["system"]["model"].update({"base_url": url, **model})
    config["concurrency"] = concurrency
    (root / "oloproof.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def record(root: Path):
    project = load_project(root)
    cases = load_cases(project)
    runs, _ = record_cases(project, cases, version=VERSION, run_id="run-1", fresh=True)
    verdicts = judge_cases(project, cases, runs, version=VERSION, judged_by_run="run-1")
    return cases, runs, verdicts


def as_recorded(run) -> dict[str, Any]:
    """A recording without what is timing (durations, latencies): what two runs must share."""
    data = run.model_dump(mode="json", exclude={"duration_s", "recorded_by_run"})
    for step in (data.get("trajectory") or {}).get("steps") or []:
        if isinstance(step.get("result"), dict):
            step["result"].pop("latency_s", None)
    return data


def test_cases_run_side_by_side_and_record_what_one_at_a_time_records(chat_desk):
    """At `concurrency: {system: 4}` four requests are in the stand-in at once (it holds the
    first until four are in); the recordings and the verdicts are a one-at-a-time run's,
    in case order."""
    with CountingStandIn(latency_s=0.3, gather=4) as standin:
        configure(chat_desk, standin.url, {"system": 4})
        cases, side_by_side, verdicts = record(chat_desk)
    assert standin.peak == 4  # never more than the concurrency, and it was reached
    assert {run.status for run in side_by_side} == {"ok"}

    with CountingStandIn() as standin:
        configure(chat_desk, standin.url, {"system": 1})
        _, one_at_a_time, serial_verdicts = record(chat_desk)
    assert standin.peak == 1
    assert [run.case_id for run in side_by_side] == [case.case_id for case in cases]  # the table's order
    assert [as_recorded(run) for run in side_by_side] == [as_recorded(run) for run in one_at_a_time]
    columns = ["case_id", "criterion", "outcome", "reason"]
    assert verdicts[columns].to_dict("records") == serial_verdicts[columns].to_dict("records")


def test_a_retry_after_pauses_every_request_to_the_endpoint(chat_desk):
    """The stand-in holds three cases' first requests and answers the fourth 429 with
    Retry-After: 1 (then answers the three after 0.3 s): it gets no request at all until a
    second after that answer, and the cases all finish (the refused one after its retry)."""
    with CountingStandIn(latency_s=0.3, gather=4, refuse_at=3) as standin:
        configure(chat_desk, standin.url, {"system": 4}, retries=2, backoff_s=0.01)
        _, runs, _ = record(chat_desk)
    assert {run.status for run in runs} == {"ok"}
    [(refused_at, _)] = [(arrived, status) for arrived, status in standin.log if status == 429]
    resume_at = refused_at + 1.0
    during_pause = [arrived for arrived, _ in standin.log if refused_at < arrived < resume_at]
    assert during_pause == []
    # Others were in flight when the 429 went out (released by it): however late a loaded
    # machine answers them, their cases' next requests and the refused one's retry come after
    # the pause, never in it.
    assert all(answered > refused_at for answered in standin.answered[:3])
    assert sum(arrived >= resume_at for arrived, _ in standin.log) >= 4
    refused_case = [run for run in runs if any(turn["attempts"] == 2 for turn in run.trajectory.model_turns())]
    assert len(refused_case) == 1


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"system": 0}, "concurrency.system"),
        ({"system": "many"}, "concurrency.system"),
        ({"judge": -1}, "concurrency.judge"),
        ({"cases": 4}, "concurrency.cases"),
        (8, "concurrency"),
    ],
)
def test_a_bad_concurrency_is_one_line_naming_file_line_and_field(chat_desk, value, field):
    configure(chat_desk, "http://127.0.0.1:9/v1", value)
    with pytest.raises(ProjectError) as refused:
        load_project(chat_desk)
    [line] = str(refused.value).splitlines()
    assert "oloproof.yaml:" in line and field in line


def test_concurrency_takes_oloprooofs_defaults_and_judge_is_kept(chat_desk):
    config = load_project(chat_desk).config
    assert (config.concurrency.system, config.concurrency.judge) == (8, 4)
    configure(chat_desk, "http://127.0.0.1:9/v1", {"system": 2, "judge": 3})
    config = load_project(chat_desk).config
    assert (config.concurrency.system, config.concurrency.judge) == (2, 3)


BROKEN_TOOLS = '''
import os
import time

from app import RefundTools


class BrokenTools(RefundTools):
    """The desk's tools, but looking one order up ends the process, and another never returns."""

    def lookup_order(self, order_id):
        if order_id == "ord-005":
            os._exit(7)
        if order_id == "ord-009":
            time.sleep(60)
        return super().lookup_order(order_id)
'''


def test_a_crash_or_a_hang_beside_other_cases_costs_only_its_own(chat_desk):
    """Four cases in flight in one worker: a tool that ends the process costs its case only
    (the cases beside it run again, the suspects one at a time), and a tool that hangs past
    the deadline is that case's timeout; every other case is recorded as usual."""
    (chat_desk / "broken.py").write_text(BROKEN_TOOLS)
    config = yaml.safe_load((chat_desk / "oloproof.yaml").read_text())
    config["system"]["tools"] = "broken:BrokenTools"
    config["execution"]["timeout_s"] = 6  # far above an ok case, however loaded the machine
    (chat_desk / "oloproof.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    with CountingStandIn(latency_s=0.05, gather=2) as standin:
        configure(chat_desk, standin.url, {"system": 4})
        cases, runs, _ = record(chat_desk)
    status = {run.case_id: run.status for run in runs}
    crashed = {case for case, value in status.items() if value == "system_crashed"}
    timed_out = {case for case, value in status.items() if value == "timeout"}
    assert {case.split("~")[0] for case in crashed} == {"ord-005"} and {case.split("~")[0] for case in timed_out} == {"ord-009"}
    assert all(value == "ok" for case, value in status.items() if case not in crashed | timed_out)
    assert "exited with code 7" in next(run.error for run in runs if run.status == "system_crashed")
    assert standin.peak >= 2  # they did run side by side
