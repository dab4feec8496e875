"""A bound printed next to its bar never reads as being on the wrong side of it."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest

from oloproof_pipeline.decide.formatting import format_bar, format_bound_against_bar

HOLDS = {"<": Decimal.__lt__, "<=": Decimal.__le__, ">": Decimal.__gt__, ">=": Decimal.__ge__}


def test_the_issue_case():
    assert format_bound_against_bar(0.89997, 0.9, "<") == "0.89997"
    assert format_bar(0.9) == "0.9"


@pytest.mark.parametrize(
    "value, bar, relation, expected",
    [
        (0.7, 0.9, "<", "0.700"),
        (0.8999999999999999, 0.9, "<", "0.8999999999999999"),
        (0.90001, 0.9, ">=", "0.900"),
        (0.9, 0.9, ">=", "0.900"),
        (0.9, 0.9, "<=", "0.900"),
        (0.900001, 0.9, ">", "0.900001"),
        (0.12349, 0.1235, "<", "0.123"),
        (0.12349, 0.1234, ">", "0.1235"),
        (0.0, 0.05, "<=", "0.000"),
        (1.0, 0.995, ">", "1.000"),
    ],
)
def test_values(value, bar, relation, expected):
    assert format_bound_against_bar(value, bar, relation) == expected


def test_printed_relation_always_holds_near_the_bar():
    rng = np.random.default_rng(7)
    for bar in (0.9, 0.8, 0.95, 0.1, 0.333, 0.5):
        for offset in np.concatenate([-(10.0 ** -rng.uniform(3, 16, 200)), 10.0 ** -rng.uniform(3, 16, 200), [0.0]]):
            value = bar + offset
            for relation, holds in HOLDS.items():
                if not {"<": value < bar, "<=": value <= bar, ">": value > bar, ">=": value >= bar}[relation]:
                    continue
                text = format_bound_against_bar(value, bar, relation)
                assert holds(Decimal(text), Decimal(format_bar(bar))), (value, bar, relation, text)
                assert len(text.split(".")[1]) >= 3


def test_a_false_relation_is_refused():
    with pytest.raises(ValueError):
        format_bound_against_bar(0.95, 0.9, "<")
    with pytest.raises(ValueError):
        format_bound_against_bar(0.9, 0.9, ">")
    with pytest.raises(ValueError):
        format_bound_against_bar(0.5, 0.9, "==")
    with pytest.raises(ValueError):
        format_bound_against_bar(float("nan"), 0.9, "<")
