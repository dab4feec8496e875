"""Paths into JSON-like data, the one path syntax of every project file.

`answer`, `orders.ord-999.status`, `items.0.sku`: dot-separated keys. A key holding a dot,
a bracket, a quote, a backslash or whitespace is written double-quoted in brackets, with `\\"`
and `\\\\` for a quote and a backslash inside: `files["landlord-notices.txt"].content`.
`orders["ord-999"]` is the same path as `orders.ord-999`; `items[0]` the same as `items.0`.
A key picks a dict entry, or a list index when it is all digits and the value is a list.
The empty path "" is the value itself. In a glob path (`state_views`) a bare `*` stands for
any one key, while `["*"]` is a key spelled `*`.
"""

from __future__ import annotations

import copy
import re
from functools import lru_cache
from typing import Annotated, Any, Final, Iterable, Sequence

from pydantic import AfterValidator


class _Absent:
    """The value at a path that does not exist; unlike None, which is a stored null."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent()


class _Wildcard(str):
    """A glob path's bare `*`: a str (so keys and patterns mix) that no quoted key is."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return other is self

    def __hash__(self) -> int:
        return hash(("wildcard", "*"))

    def __repr__(self) -> str:
        return "WILDCARD"


WILDCARD: Final = _Wildcard("*")

# A key that needs no quoting: no dot, bracket, quote, backslash or whitespace.
BARE_KEY = re.compile(r'[^.\[\]"\\\s]+')
INDEX = re.compile(r"\[(\d+)\]")
EXAMPLE = 'e.g. \'orders.ord-1.status\' or \'files["notes.txt"].content\''


class PathSyntaxError(ValueError):
    """A path that does not parse; the message says where and shows how to write one."""


def _quoted_key(path: str, start: int) -> tuple[str, int]:
    """The key of a `["..."]` starting at `start` (at the `[`), and the index after its `]`."""
    key, at = [], start + 2
    while at < len(path):
        char = path[at]
        if char == "\\":
            if at + 1 >= len(path) or path[at + 1] not in '"\\':
                raise PathSyntaxError(f"{path!r} is not a path: only \\\" and \\\\ are escapes inside quotes, {EXAMPLE}")
            key.append(path[at + 1])
            at += 2
        elif char == '"':
            if not path.startswith("]", at + 1):
                raise PathSyntaxError(f"{path!r} is not a path: a quoted key must end with \"], {EXAMPLE}")
            return "".join(key), at + 2
        else:
            key.append(char)
            at += 1
    raise PathSyntaxError(f"{path!r} is not a path: unclosed quote, {EXAMPLE}")


def _parse(path: str, *, glob: bool) -> list[str]:
    keys: list[str] = []
    at = 0
    while at < len(path):
        if path.startswith('["', at):
            key, at = _quoted_key(path, at)
            keys.append(key)
        elif (index := INDEX.match(path, at)) is not None:
            keys.append(index.group(1))
            at = index.end()
        else:
            if keys:
                if path[at] != ".":
                    raise PathSyntaxError(f"{path!r} is not a path: expected '.' or '[' at character {at + 1} "
                        f"(quote keys holding dots, brackets or spaces), {EXAMPLE}")
                at += 1
            bare = BARE_KEY.match(path, at)
            if bare is None:
                raise PathSyntaxError(
                    f"{path!r} is not a path: empty or unquoted key at character {at + 1} "
                    f"(quote keys holding dots, brackets or spaces), {EXAMPLE}"
                )
            keys.append(WILDCARD if glob and bare.group() == "*" else bare.group())
            at = bare.end()
    return keys


def split_path(path: str) -> list[str]:
    """The keys of `path` ("" has none); raises PathSyntaxError (a ValueError) on a malformed one."""
    return _parse(path, glob=False)


def split_glob_path(path: str) -> list[str]:
    """As `split_path`, with each bare `*` as WILDCARD (any one key)."""
    return _parse(path, glob=True)


def quote_key(key: Any) -> str:
    """A key as a path writes it: bare when it can be, else `["..."]` with escapes."""
    text = str(key)
    # A key spelled `*` is quoted too, so a path copied into a glob path names that key alone.
    if BARE_KEY.fullmatch(text) and text != "*":
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'["{escaped}"]'


def join_path(keys: Iterable[Any]) -> str:
    """The path of `keys`, which `split_path` reads back as the same keys."""
    text = ""
    for key in keys:
        part = quote_key(key)
        text += part if part.startswith("[") or not text else f".{part}"
    return text


def read_keys(data: Any, keys: Iterable[str]) -> Any:
    """The value under `keys`, or ABSENT when any step is missing."""
    value = data
    for key in keys:
        value = _child(value, key)
        if value is ABSENT:
            return ABSENT
    return value


@lru_cache(maxsize=4096)
def path_keys(path: str) -> tuple[str, ...]:
    """`split_path`'s keys, parsed once per path: judging reads the same few configured paths
    for every case (a malformed one raises each time, and is not cached)."""
    return tuple(split_path(path))


def read_path(data: Any, path: str) -> Any:
    return read_keys(data, path_keys(path))


def write_keys(data: Any, keys: Sequence[str], value: Any) -> Any:
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
    """For config validation: "" or a path `split_path` reads."""
    split_path(path)
    return path


def check_glob_path(path: str) -> str:
    """For config validation: a non-empty path whose bare `*` keys match any one key."""
    if not path:
        raise PathSyntaxError(f"'' is not a path here: name a key, {EXAMPLE}")
    split_glob_path(path)
    return path


DottedPath = Annotated[str, AfterValidator(check_dotted_path)]
GlobPath = Annotated[str, AfterValidator(check_glob_path)]


def absent_as_none(value: Any) -> Any:
    """Details are plain JSON: an absent value is shown as null next to an `absent` flag."""
    return None if value is ABSENT else value
