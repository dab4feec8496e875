"""Slice specs as `oloproof.yaml` writes them: `tool_calls:1,2`, `trajectory_length:2,4`,
`metadata.<key>` (the slicing itself is `decide/slices.py`)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .paths import join_path, split_path

NUMERIC_KINDS = ("tool_calls", "trajectory_length")
_NUMERIC_SPEC = re.compile(r"^(tool_calls|trajectory_length):(\d+(?:,\d+)*)$")


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
    if text.startswith(("metadata.", "metadata[")):
        # The key is a path into the metadata (`metadata["team.name"]` for a key with a dot).
        try:
            keys = split_path(text)
        except ValueError as error:
            raise ValueError(f"slice {text!r}: {error}") from None
        if len(keys) > 1:
            return SliceSpec(text=text, kind="metadata", key=join_path(keys[1:]))
    raise ValueError(
        f"slice {text!r} is not one of 'tool_calls:<bounds>', 'trajectory_length:<bounds>' or "
        "'metadata.<key>' (bounds are increasing integers, e.g. 'tool_calls:1,2')"
    )
