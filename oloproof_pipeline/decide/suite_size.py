"""The suite size that would decide a rule: the smallest number of cases n at which, if the
true pass rate were the observed one, the two-sided Clopper-Pearson interval over
Binomial(n, estimate) decides the rule (clears the bar: PASS; misses it entirely: FAIL) with
at least the target probability (80% by default). For clustered metrics n is multiplied by
the design effect for unequal cluster sizes (Kerry and Bland 2001, Statistics in
Medicine 20:377-390), 1 + (m_w - 1) * ICC, at the worst-case ICC of 1 (`decide/statistics.py`).

Why a probability: the size at which an interval centred on the observed rate would just clear
the bar decides only about half the time; the size reported here decides as often as asked.
Why either direction: an estimate on the failing side of the bar is decided too, as FAIL.

The probability is exact: the set of pass counts k whose interval decides is a tail
(k >= j or k <= j; Clopper-Pearson bounds grow with k), found by search on the bounds
themselves, and its probability is the binomial tail (the regularized incomplete beta that
scipy's binom.sf also evaluates).

Search: the decision probability is not monotone in n (discreteness gives it a saw-tooth), so
"the smallest n" means the smallest n whose probability reaches the target, even where a few
larger n fall back below it. It is found exactly, with no window or tolerance: let j(n) be the
fewest passes (counted towards the decision) that decide, and q(n) the most passes that the
suite still reaches with the target probability; n qualifies iff q(n) >= j(n). Both j and q
grow by 0 or 1 from n to n+1 (a property of binomial tails and Clopper-Pearson bounds), so
when q(n) - j(n) = -m < 0 no n below n + m qualifies, and the scan from n = 1 jumps ahead by m.
It never skips a qualifying n, and visits 79 sizes for 0.87 against 0.8, about 1,900 to find
that 0.8001 against 0.8 needs more than the cap, and about 13,000 (0.7 s) for the extreme of
0.801 against 0.8 at 50%, where the answer is 614,003.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Literal

from scipy import special

from ..model.outcomes import FAIL, PASS

BarKind = Literal["min", "max"]
# The decision a suite of that size reaches: PASS or FAIL.
Direction = str

SUITE_SIZE_CAP = 1_000_000


def suite_size_to_decide(
    estimate: float | None,
    bar: float,
    kind: BarKind,
    confidence: float = 0.95,
    *,
    design_effect: float = 1.0,
    power: float = 0.8,
    cap: int = SUITE_SIZE_CAP,
) -> tuple[int | None, Direction | None]:
    """(n, "PASS" | "FAIL"): the smallest suite that decides the rule with probability >=
    `power` if the true rate is `estimate`, times `design_effect` (rounded up) for clustered
    metrics. (None, None) when the estimate is missing or equals the bar, or when no suite of
    at most `cap` cases would."""
    _check_inputs(estimate, bar, kind, confidence, design_effect, power, cap)
    if estimate is None or estimate == bar:
        return None, None
    rule = _Rule.for_estimate(estimate, bar, kind, confidence)
    cases = 1
    while (scaled := math.ceil(round(cases * design_effect, 9))) <= cap:
        gap = _reachable_count(rule, cases, power) - _deciding_count(rule, cases)
        if gap >= 0:
            return scaled, rule.direction
        cases += -gap
    return None, None


def decision_probability(cases: int, estimate: float, bar: float, kind: BarKind, confidence: float = 0.95) -> tuple[float, Direction | None]:
    """(probability, direction): how likely `cases` independent cases at true rate `estimate`
    give a Clopper-Pearson interval that decides the rule, in the direction the estimate
    points (PASS above a min bar or below a max bar, else FAIL). (0.0, None) on the bar."""
    _check_inputs(estimate, bar, kind, confidence, 1.0, 0.5, max(cases, 1))
    if estimate == bar or cases < 1:
        return 0.0, None
    rule = _Rule.for_estimate(estimate, bar, kind, confidence)
    return rule.probability(cases, _deciding_count(rule, cases)), rule.direction


# -- clustered metrics ---------------------------------------------------------------------


def design_effect(cluster_sizes: list[int], icc: float) -> float:
    """The design effect for clusters of unequal size, 1 + (m_w - 1) * icc, where
    m_w = sum(m^2) / sum(m) is the case-weighted mean cluster size (Kerry and Bland 2001).
    No cases give 1.0."""
    if not 0.0 <= icc <= 1.0:
        raise ValueError(f"icc must be between 0 and 1, got {icc!r}")
    if any(size < 0 for size in cluster_sizes):
        raise ValueError("cluster sizes must be non-negative")
    total = sum(cluster_sizes)
    if total == 0:
        return 1.0
    weighted_mean_size = sum(size * size for size in cluster_sizes) / total
    return 1.0 + (weighted_mean_size - 1.0) * icc


# -- the decision at one size --------------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    """The rule seen from the side the estimate is on. Pass counts are measured towards the
    decision: j = k when the deciding bound is the lower one (the interval must sit above
    the bar), j = n - k when it is the upper one, so in both cases more j decides sooner and
    the deciding counts are j >= j(n)."""

    bar: float
    alpha: float
    deciding_bound: Literal["lower", "upper"]
    strict: bool  # the gate's comparisons: PASS on lower >= min, FAIL on upper < min, ...
    rate_towards: float  # the probability that one case counts towards j
    direction: Direction

    @classmethod
    def for_estimate(cls, estimate: float, bar: float, kind: BarKind, confidence: float) -> _Rule:
        alpha = 1.0 - confidence
        above = estimate > bar
        if kind == "min":
            # PASS when lower >= bar; FAIL when upper < bar.
            return cls(bar, alpha, "lower", False, estimate, PASS) if above else cls(bar, alpha, "upper", True, 1.0 - estimate, FAIL)
        # PASS when upper <= bar; FAIL when lower > bar.
        return cls(bar, alpha, "lower", True, estimate, FAIL) if above else cls(bar, alpha, "upper", False, 1.0 - estimate, PASS)

    def decides(self, towards: int, cases: int) -> bool:
        if self.deciding_bound == "lower":
            bound = _clopper_pearson_lower(towards, cases, self.alpha)
            return bound > self.bar if self.strict else bound >= self.bar
        bound = _clopper_pearson_upper(cases - towards, cases, self.alpha)
        return bound < self.bar if self.strict else bound <= self.bar

    def probability(self, cases: int, deciding: int) -> float:
        """P(j >= deciding) for j ~ Binomial(cases, rate_towards)."""
        return _at_least(deciding, cases, self.rate_towards)


def _clopper_pearson_lower(successes: int, trials: int, alpha: float) -> float:
    # special.betaincinv is what stats.beta.ppf computes, without its per-call overhead.
    return 0.0 if successes <= 0 else float(special.betaincinv(successes, trials - successes + 1, alpha / 2))


def _clopper_pearson_upper(successes: int, trials: int, alpha: float) -> float:
    return 1.0 if successes >= trials else float(special.betaincinv(successes + 1, trials - successes, 1 - alpha / 2))


def _at_least(count: int, trials: int, rate: float) -> float:
    """P(Binomial(trials, rate) >= count), as stats.binom.sf(count - 1, ...) computes it:
    the regularized incomplete beta I_rate(count, trials - count + 1)."""
    if count <= 0:
        return 1.0
    if count > trials:
        return 0.0
    return float(special.betainc(count, trials - count + 1, rate))


def _deciding_count(rule: _Rule, cases: int) -> int:
    """j(n): the fewest counts towards the decision whose interval decides; cases + 1 if none.
    The guess is the normal approximation to the binomial-tail form of the bound
    (lower(j, n) >= c iff P(Binomial(n, c) >= j) <= alpha/2); the bounds settle it."""
    towards_bar = min(max(rule.bar if rule.deciding_bound == "lower" else 1.0 - rule.bar, 0.0), 1.0)
    z = _normal_quantile(1.0 - rule.alpha / 2)
    guess = cases * towards_bar + z * math.sqrt(cases * towards_bar * (1.0 - towards_bar)) + 1
    return _first_true(lambda towards: rule.decides(towards, cases), guess, cases + 1)


def _reachable_count(rule: _Rule, cases: int, power: float) -> int:
    """q(n): the most counts towards the decision reached with probability >= power."""
    rate = rule.rate_towards
    guess = cases * rate - _normal_quantile(power) * math.sqrt(cases * rate * (1.0 - rate)) + 1
    falls_short = lambda towards: _at_least(towards, cases, rate) < power  # noqa: E731
    return _first_true(falls_short, guess, cases + 1) - 1


def _normal_quantile(probability: float) -> float:
    return float(special.ndtri(probability))


def _first_true(predicate: Callable[[int], bool], guess: float, end: int) -> int:
    """The first j in 0..end with predicate(j), for a predicate false then true, with
    predicate(end) taken as true. Gallops from the guess, then bisects: a good guess costs
    two evaluations, a bad one O(log distance)."""
    start = int(guess) if math.isfinite(guess) else end // 2
    start = min(max(start, 0), end)
    if start == end or predicate(start):
        high, step = start, 1  # predicate(high) holds; look below for the first false
        while True:
            low = high - step
            if low < 0:
                low = -1  # nothing below 0: a false sentinel
                break
            if not predicate(low):
                break
            high, step = low, step * 2
    else:
        low, step = start, 1  # predicate(low) fails; look above for a true
        while True:
            high = low + step
            if high >= end:
                high = end
                break
            if predicate(high):
                break
            low, step = high, step * 2
    while high - low > 1:
        middle = (low + high) // 2
        if predicate(middle):
            high = middle
        else:
            low = middle
    return high


def _check_inputs(estimate, bar, kind, confidence, design_effect_value, power, cap) -> None:
    if kind not in ("min", "max"):
        raise ValueError(f"kind must be 'min' or 'max', got {kind!r}")
    if estimate is not None and not 0.0 <= estimate <= 1.0:
        raise ValueError(f"estimate must be between 0 and 1, got {estimate!r}")
    if not math.isfinite(bar):
        raise ValueError(f"bar must be a finite number, got {bar!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be between 0 and 1, got {power!r}")
    if not (math.isfinite(design_effect_value) and design_effect_value > 0):
        raise ValueError(f"design_effect must be a positive number, got {design_effect_value!r}")
    if int(cap) != cap or cap < 1:
        raise ValueError(f"cap must be a positive integer, got {cap!r}")
