"""Content digests compatible with Oloproof's labels.

`digest(tag, value)` is sha256 over the tag, a NUL byte and the value's canonical JSON.
The state a case leaves behind is an output and never enters any digest here.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

CASE_TAG = "scenario/v1"
TRANSFORM_TAG = "metamorphic_transform/v1"
PAIR_TAG = "metamorphic_pair/v1"
ENVIRONMENT_STATE_TAG = "environment_state/v1"


# One encoder for every call: `json.dumps` with these options builds a new one each time,
# about half the cost of encoding a case's state (called for every JSON cell a table stores).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, UTF-8 text, NaN refused: the same bytes on every machine."""
    return _CANONICAL.encode(value)


def digest(tag: str, value: Any) -> str:
    payload = tag.encode("utf-8") + b"\x00" + canonical_json(value).encode("utf-8")
    return "sha256:" + hashlib.sha256(payload).hexdigest()


def case_digest(
    *,
    input: Any,
    expected: Any,
    metadata: Any,
    group_id: str | None,
    initial_state: Any = None,
    include_initial_state: bool = False,
) -> str:
    """A case's identity. `initial_state` counts only when the case set declares starting states."""
    body: dict[str, Any] = {
        "input": input,
        "expected": expected,
        "metadata": metadata if metadata is not None else {},
        "group_id": group_id,
    }
    if include_initial_state:
        body["initial_state"] = initial_state
    return digest(CASE_TAG, body)


def transform_digest(*, name: str, version: int, field: str, template: str | None, replace: Any) -> str:
    """Validity labels and minimum validity are left out: relabelling does not change a transform."""
    return digest(
        TRANSFORM_TAG,
        {"name": name, "version": version, "field": field, "template": template, "replace": replace},
    )


def pair_digest(*, transform: str, source_input: Any, derived_input: Any) -> str:
    return digest(PAIR_TAG, {"transform": transform, "source_input": source_input, "input": derived_input})


def state_digest(state: Any) -> str:
    """Digest of a starting state, as stored in an environment_state/v1 record."""
    return digest(ENVIRONMENT_STATE_TAG, state)
