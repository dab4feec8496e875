"""The report's interval charts, as geometry: each row's interval on a 0-1 axis, its estimate
as a dot, its bars as ticks with the side that clears them shaded, a reference diamond (the
rate over all cases, for a slice bucket) and a note on the right. `templates/chart.svg.j2`
draws a `Chart` as inline SVG, so the report needs no script or network to show it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model.outcomes import FAIL, MISSING, PASS

COLOURS = {PASS: "#176f2c", FAIL: "#b00020", MISSING: "#a15c00", "INSUFFICIENT_EVIDENCE": "#a15c00",
           "MANUAL_REVIEW": "#7b1fa2", None: "#555"}
LABEL_WIDTH, PLOT_WIDTH, NOTE_WIDTH, ROW_HEIGHT, TOP = 340, 420, 330, 24, 26
TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass
class ChartRow:
    label: str
    estimate: float | None
    lower: float | None
    upper: float | None
    bars: list[tuple[float, str]]  # (value, "min" | "max")
    tone: str | None
    note: str = ""
    reference: float | None = None  # e.g. the rate over all cases, for a slice bucket


@dataclass
class DrawnRow:
    """A chart row placed on the chart: x positions in pixels, values for the tooltips."""

    row: ChartRow
    top: float
    middle: float
    colour: str
    shades: list[tuple[float, float]] = field(default_factory=list)  # (x, width) per bar
    interval: tuple[float, float] | None = None  # (x of lower, x of upper)
    reference_x: float | None = None
    estimate_x: float | None = None
    bar_xs: list[tuple[float, float, str]] = field(default_factory=list)  # (x, value, kind)


@dataclass
class Chart:
    chart_id: str
    title: str
    width: int
    height: int
    ticks: list[tuple[float, float]]  # (x, value)
    rows: list[DrawnRow]


def x_of(value: float) -> float:
    return LABEL_WIDTH + max(0.0, min(1.0, value)) * PLOT_WIDTH


def interval_chart(rows: list[ChartRow], chart_id: str, title: str) -> Chart:
    return Chart(
        chart_id=chart_id,
        title=title,
        width=LABEL_WIDTH + PLOT_WIDTH + NOTE_WIDTH,
        height=TOP + ROW_HEIGHT * len(rows) + 8,
        ticks=[(x_of(tick), tick) for tick in TICKS],
        rows=[drawn_row(row, TOP + index * ROW_HEIGHT) for index, row in enumerate(rows)],
    )


def drawn_row(row: ChartRow, top: float) -> DrawnRow:
    shades = []
    for value, kind in row.bars:  # the side of the bar that clears it
        start, end = (x_of(value), x_of(1.0)) if kind == "min" else (x_of(0.0), x_of(value))
        shades.append((start, end - start))
    return DrawnRow(
        row=row,
        top=top,
        middle=top + ROW_HEIGHT / 2,
        colour=COLOURS.get(row.tone, COLOURS[None]),
        shades=shades,
        interval=None if row.lower is None or row.upper is None else (x_of(row.lower), x_of(row.upper)),
        reference_x=None if row.reference is None else x_of(row.reference),
        estimate_x=None if row.estimate is None else x_of(row.estimate),
        bar_xs=[(x_of(value), value, kind) for value, kind in row.bars],
    )


def bar_margin(rule: dict[str, Any]) -> str:
    """By how much the interval clears (or misses) each bar: `lower clears min 0.85 by 0.008`."""
    notes = []
    lower, upper = rule["lower"], rule["upper"]
    for value, kind in rule_bars(rule):
        if lower is None or upper is None:
            continue
        inside, outside = (lower - value, upper - value) if kind == "min" else (value - upper, value - lower)
        if inside >= 0:
            notes.append(f"clears {kind} {value:g} by {inside:.3f}")
        elif outside < 0:
            notes.append(f"misses {kind} {value:g} by {-outside:.3f}")
        else:
            notes.append(f"straddles {kind} {value:g} ({-inside:.3f} short)")
    return "; ".join(notes)


def rule_bars(rule: dict[str, Any]) -> list[tuple[float, str]]:
    bars = []
    if rule.get("bar_min") is not None:
        bars.append((float(rule["bar_min"]), "min"))
    if rule.get("bar_max") is not None:
        bars.append((float(rule["bar_max"]), "max"))
    return bars


def gate_chart(gate: list[dict[str, Any]]) -> Chart | None:
    """Each rule's interval against its bar (None without rules); `gate`: the gate's rows."""
    rows = [
        ChartRow(
            label=f"{rule['rule_id']} ({rule['decision']})", estimate=rule["estimate"], lower=rule["lower"],
            upper=rule["upper"], bars=rule_bars(rule), tone=rule["decision"],
            note=bar_margin(rule) if rule["decision"] in (PASS, FAIL, "INSUFFICIENT_EVIDENCE") else rule["decision"],
        )
        for rule in gate
    ]
    return interval_chart(rows, "gate-chart", "Each rule's interval against its bar") if rows else None


def slices_chart(slice_rows: list[dict[str, Any]], chart_id: str, title: str) -> Chart:
    """One slice's buckets, each against the rate over all cases."""
    rows = [
        ChartRow(
            label=f"{row['criterion']} · {row['bucket']}", estimate=row["estimate"], lower=row["lower"],
            upper=row["upper"], bars=[], tone=FAIL if row["differs"] else None, reference=row["whole_estimate"],
            note=(
                f"{row['support']} cases" + (", under min_slice_support" if row["lower"] is None else "")
                + (", differs" if row["differs"] else "")
            ),
        )
        for row in slice_rows
    ]
    return interval_chart(rows, chart_id, title)
