"""What every command prints through: the two consoles sized to their streams, the one-line
error, the JSON document on stdout, and the styles shared by the tables."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, NoReturn

from rich import box
from rich.console import Console
from rich.table import Table

from ..model.outcomes import FAIL, INSUFFICIENT_EVIDENCE, MANUAL_REVIEW, PASS


def output_width(stream) -> int | None:
    """A terminal's own width; piped output (CI logs, files) gets $COLUMNS, else a wide 200
    instead of rich's 80-column fallback."""
    if stream.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else 200


console = Console(width=output_width(sys.stdout))
error_console = Console(stderr=True, width=output_width(sys.stderr))

DECISION_STYLES = {PASS: "green", FAIL: "red", INSUFFICIENT_EVIDENCE: "yellow", MANUAL_REVIEW: "magenta"}


def fail(message: str, exit_code: int) -> NoReturn:
    error_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    sys.exit(exit_code)


def print_json(document: dict[str, Any]) -> None:
    """One JSON document on stdout (NaN refused: it is not JSON)."""
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    sys.stdout.flush()


def compact_table(title: str) -> Table:
    """A titled table with a rule under its header and no edges: narrow enough for 80 columns."""
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                 collapse_padding=True)
