"""Importing a module of the project (the system, a python grader) by its file."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

from .config import PROJECT_FILE
from .errors import ProjectError

# A system written for Oloproof imports these; they come with the `oloproof` extra.
OLOPROOF_PACKAGES = ("oloproof", "oloproof_core")
OLOPROOF_EXTRA = "install the oloproof extra to run it: pip install 'oloproof-pipeline[oloproof]'"


def load_callable(project_root: Path, reference: str, *, where: str | None = None) -> Any:
    """Import `module:attr` with the module's file found relative to the project folder.

    Each project's modules get names of their own, so two projects that both ship an
    `app.py` never share one module; every call imports afresh, so a version bump made
    while a process runs (the sensor's case) is seen. `where` names the setting in errors
    (default `system.callable`).
    """
    module_name, _, attribute_path = reference.partition(":")
    module_file = module_file_of(project_root, reference)
    where = where or f"{project_root / PROJECT_FILE}: system.callable"
    if not module_file.is_file():
        raise ProjectError(f"{where}: no module file {module_file}")
    unique_name = "oloproof_system_" + re.sub(r"\W", "_", f"{project_root.name}_{module_name}")
    spec = importlib.util.spec_from_file_location(unique_name, module_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[unique_name] = module  # dataclasses and pickling look modules up here
    if str(project_root) not in sys.path:
        sys.path.insert(0, str(project_root))  # let the system import its sibling modules
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as error:
        if error.name in OLOPROOF_PACKAGES:
            raise ProjectError(f"{where}: {module_file} is written for Oloproof ({error}); {OLOPROOF_EXTRA}") from None
        raise ProjectError(f"{where}: importing {module_file} failed: {type(error).__name__}: {error}") from None
    except (Exception, SystemExit) as error:  # a module that exits on import must not end the caller
        raise ProjectError(f"{where}: importing {module_file} failed: {type(error).__name__}: {error}") from None
    value: Any = module
    for part in attribute_path.split("."):
        if not hasattr(value, part):
            raise ProjectError(f"{where}: {module_file} has no attribute {attribute_path!r}")
        value = getattr(value, part)
    if not callable(value):
        # Found now, not when the first case is run or judged.
        raise ProjectError(f"{where}: {reference} is {type(value).__name__} {value!r:.60}, not a class or a function")
    return value


def module_file_of(project_root: Path, reference: str) -> Path:
    """The file of `module:attr`'s module, relative to the project folder."""
    return project_root.joinpath(*reference.partition(":")[0].split(".")).with_suffix(".py")
