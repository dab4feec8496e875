"""Slice specs as `oloproof.yaml` writes them: `tool_calls:1,2`, `trajectory_length:2,4`,
`metadata.<key>` (the slicing itself is `decide/slices.py`)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

NUMERIC_KINDS = ("tool_calls", "trajectory_length")
_NUMERIC_SPEC = re.compile(r"^(tool_calls|trajectory_length):(\d+(?:,\d+)*)$")
_METADATA_SPEC = re.compile(r"^metadata\.([^.\s]+(?:\.[^.\s]+)*)$")


class SliceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str
    kind: Literal["tool_calls", "trajectory_length", "metadata"]
    bounds: tuple[int, ...] = ()
    key: str | None = None

    def bucket_labels(self) -> list[str]:
        """The numeric buckets in order (metadata buckets are whatever values occur)."""
        return [f"le_{bound}" for bound in self.bounds] + ([f"gt_{self.bounds[-1]}"] if self.bounds else [])


def parse_slice_spec(text: str) -> SliceSpec:
    """`tool_calls:1,2`, `trajectory_length:2,4` (increasing bounds) or `metadata.<key>`."""
    numeric = _NUMERIC_SPEC.match(text)
    if numeric:
        bounds = tuple(int(bound) for bound in numeric.group(2).split(","))
        if any(later <= earlier for earlier, later in zip(bounds, bounds[1:])):
            raise ValueError(f"slice {text!r}: bounds must increase, e.g. 'tool_calls:1,2'")
        return SliceSpec(text=text, kind=numeric.group(1), bounds=bounds)
    metadata = _METADATA_SPEC.match(text)
    if metadata:
        return SliceSpec(text=text, kind="metadata", key=metadata.group(1))
    raise ValueError(
        f"slice {text!r} is not one of 'tool_calls:<bounds>', 'trajectory_length:<bounds>' or "
        "'metadata.<key>' (bounds are increasing integers, e.g. 'tool_calls:1,2')"
    )
