"""`oloproof run --set KEY=VALUE`: one key of `oloproof.yaml` changed for one run, so a second
agent or model is a flag, not an edit (`--set system.model.name=gpt-x`).

KEY is a dotted path into the file's mapping (`model/paths.py`'s syntax); a missing mapping on
the way is created, a list item is named by its index. VALUE is read as a YAML value, as the
file's would be (`3` a number, `true` a boolean, `[a, b]` a list, `gpt-x` text). The changed
data is validated exactly as the file is, so a bad value is the same one-line error, naming the
`--set` it came from.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import yaml

from .errors import ProjectError
from .paths import split_path

SET_OPTION = "--set"


@dataclass(frozen=True)
class Setting:
    """One `--set KEY=VALUE`, as written and as read."""

    written: str
    keys: tuple[str, ...]
    value: Any


def parse_setting(written: str) -> Setting:
    """`KEY=VALUE` read; a usage error (ProjectError) when it is not one."""
    key, equals, text = written.partition("=")
    keys = split_path(key.strip()) if key.strip() else []
    if not equals or not keys or not all(keys):
        raise ProjectError(f"{SET_OPTION} {written!r}: expected KEY=VALUE with a dotted key, e.g. system.model.name=gpt-x")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as error:
        raise ProjectError(f"{SET_OPTION} {written!r}: the value is not YAML: {error}") from None
    return Setting(written=written, keys=tuple(keys), value=value)


def parse_settings(written: list[str] | tuple[str, ...]) -> list[Setting]:
    return [parse_setting(text) for text in written]


def apply_settings(data: Any, settings: list[Setting], *, file: str) -> Any:
    """A copy of the file's data with each setting applied in order."""
    changed = copy.deepcopy(data)
    for setting in settings:
        changed = _set(changed, setting, file)
    return changed


def _set(data: Any, setting: Setting, file: str) -> Any:
    if not isinstance(data, dict):
        raise ProjectError(f"{file}:1: expected a mapping of keys at the top level")
    parent: Any = data
    for depth, key in enumerate(setting.keys[:-1]):
        child = _child(parent, key)
        if child is None:
            child = {}
            _put(parent, key, child, setting, depth)
        elif not isinstance(child, (dict, list)):
            where = ".".join(setting.keys[: depth + 1])
            raise ProjectError(f"{SET_OPTION} {setting.written!r}: {where} is {child!r}, not a mapping to set a key in")
        parent = child
    _put(parent, setting.keys[-1], setting.value, setting, len(setting.keys) - 1)
    return data


def _child(parent: dict | list, key: str) -> Any:
    if isinstance(parent, list):
        return parent[int(key)] if key.isdigit() and int(key) < len(parent) else None
    return parent.get(key)


def _put(parent: dict | list, key: str, value: Any, setting: Setting, depth: int) -> None:
    if isinstance(parent, dict):
        parent[key] = value
        return
    if not (key.isdigit() and int(key) < len(parent)):
        where = ".".join(setting.keys[:depth]) or "the file"
        raise ProjectError(f"{SET_OPTION} {setting.written!r}: {where} is a list of {len(parent)}; {key!r} is no index in it")
    parent[int(key)] = value
