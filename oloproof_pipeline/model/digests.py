"""Content digests compatible with Oloproof's labels.

`digest(tag, value)` is sha256 over the tag, a NUL byte and the value's canonical JSON.
The state a case leaves behind is an output and never enters any digest here.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
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
    return text_digest(tag, canonical_json(value))


def text_digest(tag: str, text: str) -> str:
    """`digest` of the value whose canonical JSON is `text`."""
    payload = tag.encode("utf-8") + b"\x00" + text.encode("utf-8")
    return "sha256:" + hashlib.sha256(payload).hexdigest()


def json_text(value: Any) -> str | None:
    """A value as the tables store it: its canonical JSON, None for null."""
    return None if value is None else canonical_json(value)


def object_text(members: dict[str, str | None]) -> str:
    """The canonical JSON of an object whose values are given as their canonical JSON text
    (None: null): the very text `canonical_json` makes of the object, with no value encoded
    again (a case's members are stored as such texts, and a copy shares most of its source's)."""
    return "{" + ",".join(
        f"{_member_name(key)}:{'null' if text is None else text}" for key, text in sorted(members.items())
    ) + "}"


@lru_cache(maxsize=256)
def _member_name(key: str) -> str:
    """A member's name as canonical JSON writes it (a few fixed names, encoded once each)."""
    return canonical_json(key)


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
    return case_text_digest(
        input=json_text(input), expected=json_text(expected), metadata=json_text(metadata), group_id=group_id,
        initial_state=json_text(initial_state) if include_initial_state else None, include_initial_state=include_initial_state,
    )


def case_text_digest(
    *,
    input: str | None,
    expected: str | None,
    metadata: str | None,
    group_id: str | None,
    initial_state: str | None = None,
    include_initial_state: bool = False,
) -> str:
    """`case_digest` of the case whose members are these canonical JSON texts (None: null)."""
    body = {
        "input": input,
        "expected": expected,
        "metadata": metadata if metadata is not None else "{}",
        "group_id": json_text(group_id),
    }
    if include_initial_state:
        body["initial_state"] = initial_state
    return text_digest(CASE_TAG, object_text(body))


def transform_digest(*, name: str, version: int, field: str, template: str | None, replace: Any) -> str:
    """Validity labels and minimum validity are left out: relabelling does not change a transform."""
    return digest(
        TRANSFORM_TAG,
        {"name": name, "version": version, "field": field, "template": template, "replace": replace},
    )


def pair_digest(*, transform: str, source_input: Any, derived_input: Any) -> str:
    return pair_text_digest(transform=transform, source_input=json_text(source_input), derived_input=json_text(derived_input))


def pair_text_digest(*, transform: str, source_input: str | None, derived_input: str | None) -> str:
    """`pair_digest` of the inputs whose canonical JSON texts these are (None: null)."""
    return text_digest(PAIR_TAG, object_text({"transform": json_text(transform), "source_input": source_input, "input": derived_input}))


def state_digest(state: Any) -> str:
    """Digest of a starting state, as stored in an environment_state/v1 record."""
    return digest(ENVIRONMENT_STATE_TAG, state)
