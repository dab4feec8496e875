"""The report's small pieces of HTML, each escaped as `{{ value }}` is: the escaping every value
goes through (`escaped`), and the pieces every table row repeats (an outcome, a case link, a
run link or its hole, a table's head). The Jinja2 templates use them as filters; the case
panels (`panel_html`) write the same markup with their values escaped all at once."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from markupsafe import Markup

from .report_view import PANEL_RUN_LINK_FIELDS, CasePanel
from .wording import short_run_id

# Text at most this long is kept escaped: the values every row repeats (run ids, criteria,
# outcomes) are short, and a large suite's inputs and answers would fill the cache for nothing.
REPEATED_TEXT = 80


@lru_cache(maxsize=65536)
def _escaped_repeated(text: str) -> Markup:
    """Run ids, criteria and outcomes repeat on every row of a large report: escaped once each."""
    return Markup(html.escape(text))


def _escaped(text: str) -> Markup:
    return _escaped_repeated(text) if len(text) <= REPEATED_TEXT else Markup(html.escape(text))


def escaped(value: Any) -> Markup:
    """Every `{{ value }}`: escaped with the entities `html.escape` writes (`&quot;`, `&#x27;`),
    so the report's bytes are what they were before the templates; None prints as nothing.
    Markup (a macro's output) is already HTML."""
    if type(value) is str:  # most values: tested first, and `_escaped` inlined
        return _escaped_repeated(value) if len(value) <= REPEATED_TEXT else Markup(html.escape(value))
    if isinstance(value, Markup):
        return value
    return _escaped("" if value is None else str(value))


# The small pieces every table row repeats, as Python filters rather than Jinja macros: a
# report of 2,400 cases writes some 270,000 of them, and a macro call costs Jinja many times
# what the piece does. Each escapes as `{{ value }}` does (`escaped`); the templates keep the
# layout around them.


@lru_cache(maxsize=256)
def outcome_span(value: str | None) -> Markup:
    """An outcome (or a decision) in the span its colour is styled by."""
    text = escaped(value)
    return Markup(f'<span class="{text}">{text}</span>')


def case_link(case_id: str) -> Markup:
    """A link to the case's panel, named by its id."""
    text = escaped(case_id)
    return Markup(f'<a href="#case-{text}">{text}</a>')


# Where a kept panel links to a run (see `RunLinkHole`): no text a recording holds can spell
# it, since every `<` in one is escaped.
RUN_LINK_HOLE = "<run-link "
_HOLES = re.compile(f"{RUN_LINK_HOLE}([0-9]+)>")


@dataclass(frozen=True)
class RunLinkHole:
    """A run link left out of a panel as it is rendered (the `index`th of the runs its verdict
    rows link to), so the panel is kept by what it shows of its case and fits any run that
    recorded and judged it alike; `with_run_links` fills it as the report is written."""

    index: int


def run_link(run_id: str | RunLinkHole | None, dagster_url: str | None) -> Markup:
    """A short run id, linked to the run's page when a Dagster webserver URL is configured."""
    if isinstance(run_id, RunLinkHole):
        return _hole_markup(run_id.index)
    return _run_link(run_id, dagster_url)


@lru_cache(maxsize=4096)
def _run_link(run_id: str | None, dagster_url: str | None) -> Markup:
    if not run_id:
        return Markup("-")
    short = f'<code title="{escaped(run_id)}">{escaped(short_run_id(run_id))}</code>'
    return Markup(f'<a href="{escaped(dagster_url)}/runs/{escaped(run_id)}">{short}</a>' if dagster_url else short)


@lru_cache(maxsize=None)
def run_link_hole(index: int) -> RunLinkHole:
    return RunLinkHole(index)


@lru_cache(maxsize=None)
def _hole_markup(index: int) -> Markup:
    return Markup(f"{RUN_LINK_HOLE}{index}>")


def take_out_run_links(panel: CasePanel) -> list[str | None]:
    """The runs the panel's verdict rows link to, in order, each replaced by its hole in the
    panel's own verdict rows (the panel is built for this one render)."""
    run_ids: list[str | None] = []
    for verdict in panel.verdicts:
        for name in PANEL_RUN_LINK_FIELDS:
            run_ids.append(verdict[name])
            verdict[name] = run_link_hole(len(run_ids) - 1)
    return run_ids


def with_run_links(section: str, run_ids: list[str | None], dagster_url: str | None) -> Markup:
    """A panel with each run link hole filled: the run ids in the order its holes number them."""
    parts = _HOLES.split(section)  # the text between holes, each hole's number between them
    links = [_run_link(run_id, dagster_url) for run_id in run_ids]
    parts[1::2] = [links[int(index)] for index in parts[1::2]]
    return Markup("".join(parts))


def table_head(headers: list[str]) -> Markup:
    """A table's opening up to its body: the rows and `</tbody></table>` follow in the template."""
    return _table_head(tuple(headers))


@lru_cache(maxsize=256)
def _table_head(headers: tuple[str, ...]) -> Markup:
    cells = "".join(f"<th>{escaped(header)}</th>" for header in headers)
    return Markup(f"<table><thead><tr>{cells}</tr></thead><tbody>")


