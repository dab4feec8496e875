"""Dotted paths into JSON-like data: "answer", "orders.ord-999.status", "items.0.sku".

A segment picks a dict key, or a list index when it is all digits and the value is a list.
The empty path "" is the value itself. Keys that contain a dot cannot be addressed.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any, Final, Iterable

from pydantic import AfterValidator


class _Absent:
    """The value at a path that does not exist; unlike None, which is a stored null."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent()


def split_path(path: str) -> list[str]:
    return path.split(".") if path else []


def join_path(keys: Iterable[Any]) -> str:
    return ".".join(str(key) for key in keys)


def read_keys(data: Any, keys: Iterable[str]) -> Any:
    """The value under `keys`, or ABSENT when any step is missing."""
    value = data
    for key in keys:
        value = _child(value, key)
        if value is ABSENT:
            return ABSENT
    return value


def read_path(data: Any, path: str) -> Any:
    return read_keys(data, split_path(path))


def write_keys(data: Any, keys: list[str], value: Any) -> Any:
    """A copy of `data` with `value` at `keys`, whose parent `read_keys` finds."""
    if not keys:
        return value
    changed = copy.deepcopy(data)
    parent = read_keys(changed, keys[:-1])
    last = keys[-1]
    parent[int(last) if isinstance(parent, list) else last] = value
    return changed


def _child(value: Any, key: str) -> Any:
    if isinstance(value, dict):
        return value.get(key, ABSENT)
    if isinstance(value, list) and key.isascii() and key.isdigit():
        index = int(key)
        return value[index] if index < len(value) else ABSENT
    return ABSENT


def check_dotted_path(path: str) -> str:
    """For config validation: "" or dot-separated non-empty segments."""
    if path and not all(split_path(path)):
        raise ValueError(f"{path!r} is not a dotted path: segments must be non-empty, e.g. 'orders.ord-1.status'")
    return path


DottedPath = Annotated[str, AfterValidator(check_dotted_path)]


def absent_as_none(value: Any) -> Any:
    """Details are plain JSON: an absent value is shown as null next to an `absent` flag."""
    return None if value is ABSENT else value
