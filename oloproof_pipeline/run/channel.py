"""What travels on a worker's channel (run/supervisor.py sends, run/worker.py answers): one
JSON line per task, one per answer. A case and a recorded trajectory may travel as the JSON
text they are stored as (`StoredCase`, `EncodedTask`): the evaluating process need not make
them models only to encode them again; the worker validates every task. A recording comes
back as its row (`RecordingRow`), a replay as its text (`RunText`): what the system recorded
as the canonical JSON text the tables store, for the same reason the other way."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ..model.cases import CaseRecord
from ..model.records import RecordingRow, RunText
from ..model.trajectory import Checkpoint, ToolChange, Trajectory


@dataclass(frozen=True)
class SystemFacts:
    """What a system says about itself once built: its `version` attribute, and whether it
    can be replayed (it uses the tool box or has a `replay` method)."""

    version: str | None
    replayable: bool


class RecordTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    op: Literal["record"] = "record"
    case: CaseRecord
    # Its place in the stream, which the answer carries (cases side by side end in any order).
    number: int | None = None


class ReplayTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    op: Literal["replay"] = "replay"
    case: CaseRecord
    trajectory: Trajectory
    checkpoint: Checkpoint
    change: ToolChange | None = None
    number: int | None = None


@dataclass(frozen=True)
class StoredCase:
    """A case as its stored row holds it: its ids, and the JSON object a worker validates as
    the CaseRecord (recording sends each case so, rather than make it a model here only to
    encode it again)."""

    case_id: str
    case_digest: str
    text: str


@dataclass(frozen=True)
class EncodedTask:
    """A RecordTask or ReplayTask of a StoredCase, its other members (a replay's trajectory,
    checkpoint and change) JSON text already: on the channel, the same line."""

    op: Literal["record", "replay"]
    case: StoredCase
    members: tuple[tuple[str, str], ...] = ()
    number: int | None = None


def record_task(case: CaseRecord | StoredCase) -> "RecordTask | EncodedTask":
    """The task recording `case`: a stored case travels as the text it is stored as."""
    return EncodedTask("record", case) if isinstance(case, StoredCase) else RecordTask(case=case)


Task = Annotated[RecordTask | ReplayTask, Field(discriminator="op")]
TASKS: TypeAdapter[Task] = TypeAdapter(Task)


AnyTask = RecordTask | ReplayTask | EncodedTask


def task_line(task: AnyTask) -> bytes:
    """A task as the one JSON line its worker reads."""
    if isinstance(task, EncodedTask):
        members = "".join(f'"{name}":{text},' for name, text in task.members)
        return f'{{"op":"{task.op}","case":{task.case.text},{members}"number":{json.dumps(task.number)}}}\n'.encode()
    return task.model_dump_json().encode() + b"\n"


def numbered(task: AnyTask, number: int) -> AnyTask:
    if isinstance(task, EncodedTask):
        return replace(task, number=number)
    return task.model_copy(update={"number": number})


class WorkerMessage(BaseModel):
    """Anything said on a worker's channel: by the worker (`ready` or `failed` once built,
    then one answer per task) or by the fork server (`ended`, with its exit code)."""

    model_config = ConfigDict(extra="forbid")

    ready: SystemFacts | None = None
    failed: list[str] | None = None
    # A recording as its row (its trajectory JSON text the evaluating process writes through).
    recorded: RecordingRow | None = None
    # A replay as its text (its trajectory JSON text, made a model here only to judge it).
    replayed: RunText | None = None
    # The worker interrupted this task at its deadline and is ending: not to be trusted.
    retire: bool = False
    # The worker could not serve the task at all (never one of the system's failures).
    problem: str | None = None
    ended: int | None = None
    # The number of the task answered (cases side by side).
    number: int | None = None
