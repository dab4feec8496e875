"""The report's small pieces of HTML, each escaped as `{{ value }}` is: the escaping every value
goes through (`escaped`), and the pieces every table row repeats (an outcome, a case link, a
run link, a table's head). The Jinja2 templates use them as filters; the case
panels (`panel_html`) write the same markup with their values escaped all at once."""

from __future__ import annotations

import html
from functools import lru_cache
from typing import Any

from markupsafe import Markup

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


def case_links(case_ids: list[str]) -> Markup:
    """The cases' links, a space between: the page's head lists every failing case."""
    return Markup(" ".join([case_link(case_id) for case_id in case_ids]))


# Where a kept panel links to a run: the panel is a %-format (`%s` each link, every other `%`
# doubled) of the runs its verdict rows link to, so it is kept by what it shows of its case and
# fits any run that recorded and judged it alike; `with_run_links` fills it as it is written.
RUN_LINK_HOLE = "%s"


@lru_cache(maxsize=4096)
def run_link(run_id: str | None, dagster_url: str | None) -> Markup:
    """A short run id, linked to the run's page when a Dagster webserver URL is configured."""
    if not run_id:
        return Markup("-")
    short = f'<code title="{escaped(run_id)}">{escaped(short_run_id(run_id))}</code>'
    return Markup(f'<a href="{escaped(dagster_url)}/runs/{escaped(run_id)}">{short}</a>' if dagster_url else short)


def with_run_links(section: str, run_ids: tuple[str | None, ...], dagster_url: str | None) -> Markup:
    """A kept panel (a %-format, see `RUN_LINK_HOLE`) with its run links, in order, filled in."""
    return Markup(section % _run_links(run_ids, dagster_url))


@lru_cache(maxsize=1024)
def _run_links(run_ids: tuple[str | None, ...], dagster_url: str | None) -> tuple[Markup, ...]:
    """A panel's run links: most panels of a report link to the same few runs in the same order."""
    return tuple([run_link(run_id, dagster_url) for run_id in run_ids])


def table_head(headers: list[str]) -> Markup:
    """A table's opening up to its body: the rows and `</tbody></table>` follow in the template."""
    return _table_head(tuple(headers))


@lru_cache(maxsize=256)
def _table_head(headers: tuple[str, ...]) -> Markup:
    cells = "".join(f"<th>{escaped(header)}</th>" for header in headers)
    return Markup(f"<table><thead><tr>{cells}</tr></thead><tbody>")


