"""Views of a state for comparing only what matters: glob paths, ignored paths, row tables.

A glob path is a path (`model/paths.py`) whose keys may be a bare `*` (any one key or list index), e.g.
`notes.*.text`. `match_rows_by` turns a table held as a list of row objects into an object keyed
by one field of each row, so rows compare by key instead of by position (`waivers` by
`condition_id`); `ignore` drops every matching path from both sides before they are compared,
so the details a person reads never show a value that was not judged.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from ..model.paths import ABSENT, WILDCARD, GlobPath, split_glob_path

__all__ = ["GlobPath", "glob_matches", "state_view", "without_ignored", "with_rows_keyed"]


def glob_matches(pattern: Sequence[str], keys: Sequence[Any]) -> bool:
    """True when `keys` (a key path, list indexes as ints or strings) matches `pattern` exactly."""
    return len(pattern) == len(keys) and all(part in (WILDCARD, str(key)) for part, key in zip(pattern, keys))


def _children(value: Any) -> Iterable[tuple[str, Any]]:
    if isinstance(value, dict):
        return ((str(key), child) for key, child in value.items())
    if isinstance(value, list):
        return ((str(index), child) for index, child in enumerate(value))
    return ()


def without_ignored(value: Any, patterns: Sequence[Sequence[str]]) -> Any:
    """A copy of `value` with every path matching one of `patterns` left out (ABSENT when
    `value` itself matches). A list keeps its other items in order."""
    if not patterns:
        return value
    if any(not pattern for pattern in patterns):
        return ABSENT
    if not isinstance(value, (dict, list)):
        return value
    kept = []
    for key, child in _children(value):
        remaining = [pattern[1:] for pattern in patterns if pattern[0] in (WILDCARD, key)]
        child = without_ignored(child, remaining)
        if child is not ABSENT:
            kept.append((key, child))
    if isinstance(value, dict):
        return {key: child for key, child in kept}
    return [child for _, child in kept]


def row_key(row: Any, key_field: str, index: int) -> str:
    """The key a row is filed under: its key field's value, or `#<index>` when it has none."""
    key = row.get(key_field) if isinstance(row, dict) else None
    if isinstance(key, (str, int, float)) and not isinstance(key, bool):
        return str(key)
    return f"#{index}"


def rows_by_key(rows: list[Any], key_field: str) -> dict[str, Any]:
    """A list of rows as an object keyed by `key_field`. A key seen again gets `#2`, `#3`...,
    so a duplicated record shows as a row of its own rather than hiding the first."""
    keyed: dict[str, Any] = {}
    for index, row in enumerate(rows):
        key = base = row_key(row, key_field, index)
        repeat = 1
        while key in keyed:
            repeat += 1
            key = f"{base}#{repeat}"
        keyed[key] = row
    return keyed


def with_rows_keyed(value: Any, tables: dict[str, str], prefix: tuple[str, ...] = ()) -> Any:
    """A copy of `value` where each list at a path matching a key of `tables` is keyed by
    that table's key field (anything else at such a path is left as it is)."""
    if not tables:
        return value
    for pattern, key_field in tables.items():
        if glob_matches(split_glob_path(pattern), prefix) and isinstance(value, list):
            return rows_by_key(value, key_field)
    if isinstance(value, dict):
        return {key: with_rows_keyed(child, tables, (*prefix, str(key))) for key, child in value.items()}
    if isinstance(value, list):
        return [with_rows_keyed(child, tables, (*prefix, str(index))) for index, child in enumerate(value)]
    return value


def state_view(state: Any, *, ignore: Sequence[str] = (), rows: dict[str, str] | None = None) -> Any:
    """What is compared of a state: row tables keyed first, then ignored paths dropped (so
    `notes.*.text` reaches a note whether notes are keyed or listed)."""
    if state is ABSENT:
        return state
    keyed = with_rows_keyed(state, rows or {})
    viewed = without_ignored(keyed, [split_glob_path(pattern) for pattern in ignore])
    return {} if viewed is ABSENT else viewed
