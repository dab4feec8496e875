"""What every command prints through: the two consoles sized to their streams, text that folds
between words (and inside an identifier only at `_`, `.`, `/` or `-`), the one-line error, the
JSON document on stdout, and the styles shared by the tables.

A terminal gets its own width. Piped output (CI logs, files) gets $COLUMNS when it is set;
without it nothing is wrapped at all (a log viewer wraps as wide as it is), and no line ends in
the spaces a table pads its cells with."""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, Iterable, NoReturn

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ..model.outcomes import FAIL, INSUFFICIENT_EVIDENCE, MANUAL_REVIEW, PASS

# Piped output with no $COLUMNS: tables take their natural width, plain lines are not wrapped.
UNWRAPPED_WIDTH = 10_000


def piped_columns(stream) -> int | None:
    """$COLUMNS for piped output, when set; None for a terminal (rich measures it) or when unset."""
    if stream.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


class TrimmedLines:
    """A stream that drops the spaces before each line break (a table pads its cells to the
    column's width). The stream is looked up at each write, so a redirected sys.stdout is
    honoured; spaces at the end of a write wait for what follows them."""

    def __init__(self, stream_name: str):
        self.stream_name = stream_name
        self.pending = ""

    @property
    def stream(self):
        return getattr(sys, self.stream_name)

    def write(self, text: str) -> int:
        text = re.sub(r"[ \t]+\n", "\n", self.pending + text)
        stripped = text.rstrip(" \t")
        self.pending = text[len(stripped):]
        self.stream.write(stripped)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", "utf-8")


console = Console()
error_console = Console(stderr=True)
# Whether plain lines are wrapped (a terminal, or $COLUMNS set): see `configure_consoles`.
wrapping = {console: True, error_console: True}


def configure_consoles() -> None:
    """Size both consoles to their streams as they are now (the entry point calls this, so a
    command run in-process with another stdout or $COLUMNS is sized as a subprocess would be)."""
    for shown, name in ((console, "stdout"), (error_console, "stderr")):
        stream = getattr(sys, name)
        terminal = stream.isatty()
        columns = piped_columns(stream)
        shown.file = None if terminal else TrimmedLines(name)  # type: ignore[assignment]
        shown.width = None if terminal else (columns or UNWRAPPED_WIDTH)  # type: ignore[assignment]
        wrapping[shown] = terminal or columns is not None


configure_consoles()

DECISION_STYLES = {PASS: "green", FAIL: "red", INSUFFICIENT_EVIDENCE: "yellow", MANUAL_REVIEW: "magenta"}

# Inside an identifier (`recovers_from_error_at_issue_refund`, `orders.ord-006.status`, a path)
# a line may break only after one of these, and only when the whole does not fit on a line.
BREAK_AFTER = re.compile(r"[_./\-,:=]")
# An interval (`[0.000, 0.602]`) is one word: it never breaks at its comma.
WORD = re.compile(r"\[[^\[\]\s]+, [^\[\]\s]+\]\S*|\S+")


def _word_pieces(word: str, start: int, width: int) -> list[tuple[int, int]]:
    """A word longer than `width` as spans of at most `width` cells, each ending after a
    separator where it can (a piece with none is cut at the width: the last resort)."""
    pieces = []
    begin, end = start, start + len(word)
    while cell_len(word[begin - start:]) > width:
        limit = begin + max(width, 1)
        breaks = [match.end() + start for match in BREAK_AFTER.finditer(word, begin - start, limit - start)]
        cut = max(breaks) if breaks else limit
        pieces.append((begin, cut))
        begin = cut
    pieces.append((begin, end))
    return pieces


def line_spans(text: str, width: int, hang: int = 0) -> list[tuple[int, int]]:
    """Where `text` (one line) breaks to fit `width` cells: spans of it, one per line, between
    words, a word too long for a line of its own folded by `_word_pieces`. Lines after the
    first are `hang` cells narrower (they are indented by that much)."""
    spans: list[tuple[int, int]] = []
    start: int | None = 0  # the first line keeps its indentation
    end = 0
    for match in WORD.finditer(text):
        available = width if not spans else max(width - hang, 1)
        if start is not None and cell_len(text[start:match.end()]) <= available:
            end = match.end()
            continue
        if start is not None and end > start:
            spans.append((start, end))
        available = width if not spans else max(width - hang, 1)
        if cell_len(match.group()) <= available:
            start, end = match.start(), match.end()
            continue
        pieces = _word_pieces(match.group(), match.start(), max(width - hang, 1))
        spans.extend(pieces[:-1])
        start, end = pieces[-1]
    if start is not None and (end > start or not spans):
        spans.append((start, end))
    return spans


def longest_piece(text: str) -> int:
    """The narrowest a text can be folded without cutting inside a piece between separators."""
    pieces = (piece for word in WORD.findall(text) for piece in re.split(r"(?<=[_./\-,:=])", word))
    return max((cell_len(piece) for piece in pieces), default=0)


class Folded:
    """Text (markup allowed) that fits the width it is given: in a table cell the column's, on
    its own the console's. Lines break between words; a word wider than the line breaks after
    `_`, `.`, `/`, `-`, `,`, `:` or `=`; lines after the first are indented by `hang`."""

    def __init__(self, text: str | Text, *, hang: int = 0, style: str = ""):
        self.text = text if isinstance(text, Text) else Text.from_markup(text, style=style)
        self.hang = hang

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        lines = self.text.plain.split("\n")
        widest = max(cell_len(line.rstrip()) for line in lines)
        narrowest = max(longest_piece(line) for line in lines)
        return Measurement(min(narrowest + (self.hang if any(" " in line.strip() for line in lines) else 0), widest), widest)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in self.text.split("\n", allow_blank=True):
            for number, (start, end) in enumerate(line_spans(line.plain, options.max_width, self.hang)):
                piece = line[start:end]
                if number and self.hang:
                    piece = Text(" " * self.hang) + piece
                piece.end = "\n"
                piece.no_wrap = True
                yield piece


def say(text: str, *, to: Console | None = None, hang: int | None = None) -> None:
    """One line of prose (markup allowed), wrapped between words at the width when the output
    wraps at all; continuation lines indented two more than the first."""
    shown = to or console
    if not wrapping[shown]:
        shown.print(text, highlight=False, soft_wrap=True)
        return
    indent = len(text) - len(text.lstrip(" "))
    shown.print(Folded(text, hang=indent + 2 if hang is None else hang), highlight=False)


def say_lines(lines: Iterable[str], **keywords: Any) -> None:
    for line in lines:
        say(line, **keywords)


def heading(text: str) -> None:
    """A section's title line in bold (a rule across the whole width would not fit a pipe)."""
    say(f"[bold]{text}[/]")


def error_line(text: str) -> None:
    """An error or a warning: one line however long, whatever the width (a terminal shows it
    folded; a log keeps it whole for grep), as every bad input is reported."""
    error_console.print(text, highlight=False, soft_wrap=True)


def fail(message: str, exit_code: int) -> NoReturn:
    error_line(f"[red]error:[/red] {message}")
    sys.exit(exit_code)


def print_json(document: dict[str, Any]) -> None:
    """One JSON document on stdout (NaN refused: it is not JSON)."""
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    sys.stdout.flush()


def compact_table(title: str) -> Table:
    """A titled table with a rule under its header and no edges: narrow enough for 80 columns.
    Give its prose and identifier cells as `Folded`, so they fold between words or at `_`."""
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                 collapse_padding=True)
