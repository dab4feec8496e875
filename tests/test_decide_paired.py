"""The paired-difference interval: spot values, and its coverage computed exactly by
enumerating every 2x2 table of n pairs (print the tables with `pytest -s`).

The interval is Tango's score interval with a continuity correction of half a pair (issue 24:
uncorrected, its lower bound missed up to 5% of the time at 50-100 pairs against 2.5%). It is
still asymptotic, so coverage can dip a little below 0.95 at some true rates. The assertions:
minimum coverage >= 0.93 (0.02 of slack) and mean >= 0.945 over the grid of the issue's cases
and over the whole simplex of (p_fixed, p_broken) in steps of 0.05; and, at 24, 50, 52, 54, 56,
75 and 100 pairs (the worst n of a scan over 50..100 among them) over p_fixed, p_broken <= 0.3
in steps of 0.01 plus the simplex, minimum two-sided coverage >= 0.94 and each side's miss
<= 0.046, with the uncorrected interval's figures printed beside (one side misses 6.0% at 56).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats
from scipy.special import gammaln

from oloproof_pipeline.decide.paired import CONTINUITY_CORRECTION, PAIRED_METHOD, _score, paired_difference_interval

CONFIDENCE = 0.95
Z = stats.norm.isf((1 - CONFIDENCE) / 2)

# (p_fixed, p_broken): the issue's cases first, then a spread of others.
CHANGES = [
    (0.0, 0.0),  # nothing changed
    (0.05, 0.0),
    (0.0, 0.05),
    (0.1, 0.1),
    (0.02, 0.2),
    (0.2, 0.02),
    (0.01, 0.0),
    (0.0, 0.01),
    (0.01, 0.01),
    (0.03, 0.01),
    (0.1, 0.0),
    (0.0, 0.1),
    (0.15, 0.05),
    (0.3, 0.0),
    (0.5, 0.0),
]
BOTH_PASS = (0.1, 0.45, 0.8)
GRID = [(fixed, broken, both) for fixed, broken in CHANGES for both in BOTH_PASS if fixed + broken + both <= 1.0 + 1e-12]


# -- spot values ---------------------------------------------------------------------------


def test_method_name():
    assert PAIRED_METHOD == "tango_score"


def test_nothing_changed_gives_an_interval_around_zero_of_real_width():
    lower, upper = paired_difference_interval(both_pass=20, fixed=0, broken=0, both_fail=4)
    # No discordant pairs: q = 0, so the corrected Z is (n d - 1/2) / sqrt(n d (1 - d)), and
    # Z = z is the larger root of (n^2 + z^2 n) d^2 - (n + z^2 n) d + 1/4 = 0 (0.172 at n = 24;
    # uncorrected, z^2 / (n + z^2) = 0.138).
    n = 24
    a, b = n * n + Z * Z * n, n + Z * Z * n
    expected = (b + math.sqrt(b * b - a)) / (2 * a)
    assert upper == pytest.approx(expected, abs=1e-9) and lower == pytest.approx(-expected, abs=1e-9)
    assert 0.16 < upper < 0.18


def test_four_fixed_none_broken_of_24_is_not_called_an_improvement():
    # Exact McNemar: P(4 of 4 discordant one way | no change) = 2 / 16 = 0.125, not significant;
    # uncorrected Tango's lower bound (+0.004) said it was, the corrected one does not.
    lower, upper = paired_difference_interval(both_pass=20, fixed=4, broken=0, both_fail=0)
    assert lower < 0 < 4 / 24 < upper
    assert _uncorrected_interval(4, 0, 24)[0] > 0


def test_eight_fixed_none_broken_has_upper_bound_above_the_estimate():
    lower, upper = paired_difference_interval(both_pass=16, fixed=8, broken=0, both_fail=0)
    assert upper > 8 / 24 + 0.1
    assert 0 < lower < 8 / 24


def test_swapping_fixed_and_broken_mirrors_the_interval():
    lower, upper = paired_difference_interval(both_pass=10, fixed=5, broken=2, both_fail=7)
    mirror_lower, mirror_upper = paired_difference_interval(both_pass=10, fixed=2, broken=5, both_fail=7)
    assert (mirror_lower, mirror_upper) == pytest.approx((-upper, -lower), abs=1e-12)


def test_no_pairs_and_all_one_way():
    assert paired_difference_interval(both_pass=0, fixed=0, broken=0, both_fail=0) == (-1.0, 1.0)
    assert paired_difference_interval(both_pass=0, fixed=0, broken=0, both_fail=0, missing=3) == (-1.0, 1.0)
    assert paired_difference_interval(both_pass=0, fixed=24, broken=0, both_fail=0)[1] == 1.0
    assert paired_difference_interval(both_pass=0, fixed=0, broken=24, both_fail=0)[0] == -1.0


def test_missing_pairs_widen_the_worst_case_way():
    plain = paired_difference_interval(both_pass=15, fixed=4, broken=1, both_fail=4)
    widened = paired_difference_interval(both_pass=15, fixed=4, broken=1, both_fail=4, missing=3)
    assert widened[0] < plain[0] and widened[1] > plain[1]
    # Lower bound: every missing pair counted as broken; upper: every one as fixed.
    assert widened[0] == paired_difference_interval(both_pass=15, fixed=4, broken=4, both_fail=4)[0]
    assert widened[1] == paired_difference_interval(both_pass=15, fixed=7, broken=1, both_fail=4)[1]


@pytest.mark.parametrize("bad", [{"fixed": -1}, {"missing": 1.5}, {"confidence": 1.0}, {"confidence": 0.0}])
def test_rejects_bad_input(bad):
    arguments = {"both_pass": 5, "fixed": 1, "broken": 1, "both_fail": 5, **bad}
    with pytest.raises(ValueError):
        paired_difference_interval(**arguments)


def test_other_confidence_levels_nest():
    counts = {"both_pass": 30, "fixed": 6, "broken": 2, "both_fail": 12}
    narrow = paired_difference_interval(**counts, confidence=0.8)
    wide = paired_difference_interval(**counts, confidence=0.99)
    middle = paired_difference_interval(**counts)
    assert wide[0] < middle[0] < narrow[0] < narrow[1] < middle[1] < wide[1]


# -- the statistic the bounds are built on -------------------------------------------------


def _independent_score(fixed: int, broken: int, pairs: int, difference: float) -> float:
    """Tango's continuity-corrected Z with the restricted maximum-likelihood p(broken) found
    numerically, not from the closed form: maximise the multinomial likelihood subject to
    p_fixed - p_broken = d."""
    rest = pairs - fixed - broken

    def negative_log_likelihood(q_broken: float) -> float:
        q_fixed = q_broken + difference
        q_rest = 1 - q_fixed - q_broken
        terms = [(fixed, q_fixed), (broken, q_broken), (rest, q_rest)]
        return -sum(count * math.log(max(q, 1e-300)) for count, q in terms if count)

    low, high = max(0.0, -difference), (1 - difference) / 2
    found = optimize.minimize_scalar(negative_log_likelihood, bounds=(low, high), method="bounded", options={"xatol": 1e-13})
    q_broken = found.x
    variance = pairs * (2 * q_broken + difference * (1 - difference))
    numerator = fixed - broken - pairs * difference
    corrected = math.copysign(max(abs(numerator) - 0.5, 0.0), numerator)  # the continuity correction
    return corrected / math.sqrt(variance)


@pytest.mark.parametrize("fixed, broken, pairs", [(3, 5, 24), (8, 0, 24), (10, 2, 50), (1, 1, 30), (12, 2, 50), (0, 7, 30)])
def test_bounds_are_where_an_independent_score_statistic_crosses_z(fixed, broken, pairs):
    lower, upper = paired_difference_interval(both_pass=pairs - fixed - broken, fixed=fixed, broken=broken, both_fail=0)
    if upper < 1.0:
        assert _independent_score(fixed, broken, pairs, upper) == pytest.approx(-Z, abs=1e-5)
    if lower > -1.0:
        assert _independent_score(fixed, broken, pairs, lower) == pytest.approx(Z, abs=1e-5)


def test_score_decreases_in_the_difference_for_every_table():
    """The bounds are single crossings only if Z falls as d rises; checked for every
    (fixed, broken) up to 50 pairs on a grid of d."""
    differences = np.linspace(-1, 1, 201)
    for pairs in (1, 2, 5, 10, 24, 50):
        for fixed in range(pairs + 1):
            for broken in range(pairs + 1 - fixed):
                scores = [_score(fixed, broken, pairs, d) for d in differences]
                assert all(later <= earlier + 1e-9 for earlier, later in zip(scores, scores[1:])), (fixed, broken, pairs)


# -- exact coverage ------------------------------------------------------------------------


def _newcombe_method10(both_pass, fixed, broken, both_fail, confidence=CONFIDENCE):
    """Newcombe (1998) method 10, for comparison only: Wilson intervals for both margins
    combined with the phi correlation (phi = 0 where its denominator is 0). Vectorised."""
    z = stats.norm.isf((1 - confidence) / 2)
    pairs = both_pass + fixed + broken + both_fail

    def wilson(successes):
        rate = successes / pairs
        centre = (rate + z * z / (2 * pairs)) / (1 + z * z / pairs)
        half = z * np.sqrt(rate * (1 - rate) / pairs + z * z / (4 * pairs * pairs)) / (1 + z * z / pairs)
        return rate, centre - half, centre + half

    candidate, candidate_low, candidate_high = wilson(both_pass + fixed)
    base, base_low, base_high = wilson(both_pass + broken)
    denominator = (both_pass + fixed) * (broken + both_fail) * (both_pass + broken) * (fixed + both_fail)
    phi = np.where(denominator > 0, (both_pass * both_fail - fixed * broken) / np.sqrt(np.where(denominator > 0, denominator, 1)), 0.0)
    difference = candidate - base
    down = np.sqrt(np.maximum((candidate - candidate_low) ** 2 - 2 * phi * (candidate - candidate_low) * (base_high - base) + (base_high - base) ** 2, 0))
    up = np.sqrt(np.maximum((candidate_high - candidate) ** 2 - 2 * phi * (candidate_high - candidate) * (base - base_low) + (base - base_low) ** 2, 0))
    return difference - down, difference + up


def _log_multinomial(counts: list[np.ndarray], probabilities: list[float]) -> np.ndarray:
    total = sum(counts)
    result = gammaln(total + 1)
    for count, probability in zip(counts, probabilities):
        result = result - gammaln(count + 1)
        if probability > 0:
            result = result + count * math.log(probability)
        else:
            result = np.where(count > 0, -np.inf, result)
    return result


def _full_tables(pairs: int, discordant):
    """Every (both_pass, fixed, broken, both_fail) of `pairs` pairs, with Tango's interval
    (from the public function, per (fixed, broken): it does not depend on how the unchanged
    pairs split, which test_interval_ignores_how_unchanged_pairs_split checks table by table)
    and Newcombe's."""
    rows = [(both_pass, fixed, broken, pairs - both_pass - fixed - broken)
            for fixed in range(pairs + 1) for broken in range(pairs + 1 - fixed) for both_pass in range(pairs + 1 - fixed - broken)]
    tables = np.array(rows)
    by_discordant = {(fixed, broken): bound for (fixed, broken), bound in zip(*discordant)}
    bounds = np.array([by_discordant[(fixed, broken)] for _, fixed, broken, _ in rows])
    newcombe = np.column_stack(_newcombe_method10(*(tables[:, i].astype(float) for i in range(4))))
    return tables, bounds, newcombe


def _coverage_full(tables, bounds, p_fixed, p_broken, p_both_pass) -> float:
    both_pass, fixed, broken, both_fail = (tables[:, i] for i in range(4))
    weights = np.exp(_log_multinomial([both_pass, fixed, broken, both_fail], [p_both_pass, p_fixed, p_broken, 1 - p_fixed - p_broken - p_both_pass]))
    truth = p_fixed - p_broken
    covered = (bounds[:, 0] <= truth + 1e-12) & (truth - 1e-12 <= bounds[:, 1])
    return float(weights[covered].sum())


def _discordant_tables(pairs: int):
    """(fixed, broken) with Tango's interval: it does not depend on how the unchanged pairs
    split between both-pass and both-fail (asserted below), so the trinomial over
    (fixed, broken, unchanged) gives exact coverage."""
    rows = [(fixed, broken) for fixed in range(pairs + 1) for broken in range(pairs + 1 - fixed)]
    tables = np.array(rows)
    bounds = np.array([paired_difference_interval(both_pass=pairs - b - c, fixed=b, broken=c, both_fail=0) for b, c in rows])
    return tables, bounds


def _coverage_discordant(tables, bounds, pairs, p_fixed, p_broken) -> float:
    fixed, broken = tables[:, 0], tables[:, 1]
    weights = np.exp(_log_multinomial([fixed, broken, pairs - fixed - broken], [p_fixed, p_broken, max(1 - p_fixed - p_broken, 0.0)]))
    truth = p_fixed - p_broken
    covered = (bounds[:, 0] <= truth + 1e-12) & (truth - 1e-12 <= bounds[:, 1])
    return float(weights[covered].sum())


@pytest.fixture(scope="module")
def enumerated():
    discordant = {pairs: _discordant_tables(pairs) for pairs in (24, 50, 100)}
    return {pairs: _full_tables(pairs, discordant[pairs]) for pairs in (24, 50)}, discordant


def test_interval_ignores_how_unchanged_pairs_split(enumerated):
    """Every table of 24 pairs, and 2000 drawn at random of 50, through the public function:
    the same interval as the (fixed, broken) lookup the coverage uses."""
    full, _ = enumerated
    rng = np.random.default_rng(2024)
    for pairs, count in ((24, None), (50, 2000)):
        tables, bounds, _ = full[pairs]
        chosen = range(len(tables)) if count is None else rng.choice(len(tables), size=count, replace=False)
        for index in chosen:
            both_pass, fixed, broken, both_fail = (int(value) for value in tables[index])
            interval = paired_difference_interval(both_pass=both_pass, fixed=fixed, broken=broken, both_fail=both_fail)
            assert interval == pytest.approx(tuple(bounds[index]), abs=1e-12)


def test_exact_coverage_over_the_grid(enumerated):
    full, discordant = enumerated
    lines = ["", f"paired interval ({PAIRED_METHOD}) exact coverage at {CONFIDENCE}; Newcombe method 10 for comparison",
             f"{'p_fixed':>7} {'p_broken':>8} {'p_both':>6} {'diff':>6} | {'n=24':>6} {'n=50':>6} {'n=100':>6} | {'N10 24':>6} {'N10 50':>6}"]
    tango = {24: [], 50: [], 100: []}
    newcombe = {24: [], 50: []}
    for p_fixed, p_broken, p_both in GRID:
        row = {}
        for pairs in (24, 50):
            tables, bounds, newcombe_bounds = full[pairs]
            row[pairs] = _coverage_full(tables, bounds, p_fixed, p_broken, p_both)
            row[("N", pairs)] = _coverage_full(tables, newcombe_bounds, p_fixed, p_broken, p_both)
            tango[pairs].append(row[pairs])
            newcombe[pairs].append(row[("N", pairs)])
        row[100] = _coverage_discordant(*discordant[100], 100, p_fixed, p_broken)
        tango[100].append(row[100])
        lines.append(f"{p_fixed:7.2f} {p_broken:8.2f} {p_both:6.2f} {p_fixed - p_broken:+6.2f} | {row[24]:6.3f} {row[50]:6.3f} {row[100]:6.3f} | "
                     f"{row[('N', 24)]:6.3f} {row[('N', 50)]:6.3f}")
    lines.append(f"{'min':>31} | {min(tango[24]):6.3f} {min(tango[50]):6.3f} {min(tango[100]):6.3f} | {min(newcombe[24]):6.3f} {min(newcombe[50]):6.3f}")
    lines.append(f"{'mean':>31} | {np.mean(tango[24]):6.3f} {np.mean(tango[50]):6.3f} {np.mean(tango[100]):6.3f} | "
                 f"{np.mean(newcombe[24]):6.3f} {np.mean(newcombe[50]):6.3f}")
    print("\n".join(lines))
    for pairs, coverages in tango.items():
        assert min(coverages) >= 0.93, (pairs, min(coverages))
        assert np.mean(coverages) >= 0.945, (pairs, np.mean(coverages))
    # The reason for choosing Tango: Newcombe's method 10 drops far lower on the same grid.
    for pairs in (24, 50):
        assert min(newcombe[pairs]) < 0.85 < min(tango[pairs])


def test_exact_coverage_over_the_simplex(enumerated):
    _, discordant = enumerated
    steps = np.round(np.arange(0, 1.0001, 0.05), 2)
    lines = ["", f"paired interval ({PAIRED_METHOD}) exact coverage over every (p_fixed, p_broken) in steps of 0.05",
             f"{'pairs':>5} {'points':>6} {'min':>6} {'at (fixed, broken)':>19} {'mean':>6} {'< 0.93':>7} {'< 0.94':>7}"]
    for pairs in (24, 50, 100):
        coverages = {}
        for p_fixed in steps:
            for p_broken in steps:
                if p_fixed + p_broken <= 1 + 1e-9:
                    coverages[(p_fixed, p_broken)] = _coverage_discordant(*discordant[pairs], pairs, p_fixed, p_broken)
        values = np.array(list(coverages.values()))
        worst = min(coverages, key=coverages.get)
        at = f"({worst[0]:.2f}, {worst[1]:.2f})"
        lines.append(f"{pairs:5d} {len(values):6d} {values.min():6.3f} {at:>19} {values.mean():6.3f} "
                     f"{(values < 0.93).mean():7.1%} {(values < 0.94).mean():7.1%}")
        assert values.mean() >= 0.945, (pairs, values.mean())
        assert values.min() >= 0.93, (pairs, worst, values.min())
    print("\n".join(lines))


# -- the continuity correction, measured -----------------------------------------------------


def _uncorrected_interval(fixed: int, broken: int, pairs: int) -> tuple[float, float]:
    """Tango's interval without the correction, for comparison: where the raw Z crosses +-z."""
    estimate = (fixed - broken) / pairs
    upper = 1.0 if _score(fixed, broken, pairs, 1.0) >= -Z else optimize.brentq(
        lambda d: max(_score(fixed, broken, pairs, d), -1e6) + Z, estimate, 1.0, xtol=1e-12)
    lower = -1.0 if _score(fixed, broken, pairs, -1.0) <= Z else optimize.brentq(
        lambda d: min(_score(fixed, broken, pairs, d), 1e6) - Z, -1.0, estimate, xtol=1e-12)
    return lower, upper


def _misses(tables, bounds, pairs, p_fixed, p_broken) -> tuple[float, float]:
    """P(lower bound above the truth), P(upper bound below it)."""
    fixed, broken = tables[:, 0], tables[:, 1]
    weights = np.exp(_log_multinomial([fixed, broken, pairs - fixed - broken], [p_fixed, p_broken, max(1 - p_fixed - p_broken, 0.0)]))
    truth = p_fixed - p_broken
    return float(weights[bounds[:, 0] > truth + 1e-12].sum()), float(weights[bounds[:, 1] < truth - 1e-12].sum())


def test_continuity_correction_coverage_and_one_sided_misses(enumerated):
    _, discordant = enumerated
    fine = [(f, b) for f in np.round(np.arange(0, 0.301, 0.01), 2) for b in np.round(np.arange(0, 0.301, 0.01), 2)]
    coarse = [(f, b) for f in np.round(np.arange(0, 1.0001, 0.05), 2) for b in np.round(np.arange(0, 1.0001, 0.05), 2) if f + b <= 1 + 1e-9]
    lines = ["", f"paired interval: exact coverage at {CONFIDENCE} with the continuity correction ({CONTINUITY_CORRECTION}) and "
             "without, over p_fixed, p_broken <= 0.3 (step 0.01) and the simplex (step 0.05)",
             f"{'pairs':>5} | {'min cov':>7} {'worst low':>9} {'worst up':>8} {'width':>6} | uncorrected: "
             f"{'min cov':>7} {'worst low':>9} {'worst up':>8} {'width':>6}"]
    uncorrected_worst_side = 0.0
    # 52, 54 and 56 pairs: where a scan of every n from 50 to 100 found the worst figures.
    for pairs in (24, 50, 52, 54, 56, 75, 100):
        tables, bounds = discordant[pairs] if pairs in discordant else _discordant_tables(pairs)
        raw = np.array([_uncorrected_interval(int(fixed), int(broken), pairs) for fixed, broken in tables])
        cells = []
        for label, interval_bounds in (("corrected", bounds), ("uncorrected", raw)):
            worst_coverage, worst_low, worst_up, widths = 1.0, 0.0, 0.0, []
            for p_fixed, p_broken in fine + coarse:
                low, up = _misses(tables, interval_bounds, pairs, p_fixed, p_broken)
                worst_coverage, worst_low, worst_up = min(worst_coverage, 1 - low - up), max(worst_low, low), max(worst_up, up)
                if p_fixed <= 0.1 and p_broken <= 0.1:
                    weights = np.exp(_log_multinomial([tables[:, 0], tables[:, 1], pairs - tables[:, 0] - tables[:, 1]],
                                                      [p_fixed, p_broken, 1 - p_fixed - p_broken]))
                    widths.append(weights @ (interval_bounds[:, 1] - interval_bounds[:, 0]))
            cells.append(f"{worst_coverage:7.3f} {worst_low:9.3f} {worst_up:8.3f} {np.mean(widths):6.3f}")
            if label == "corrected":
                assert worst_coverage >= 0.94 and max(worst_low, worst_up) <= 0.046, (pairs, worst_coverage, worst_low, worst_up)
            else:
                uncorrected_worst_side = max(uncorrected_worst_side, worst_low, worst_up)
        lines.append(f"{pairs:5d} | {cells[0]} | {'':>12} {cells[1]}")
    lines.append("width: mean over p_fixed, p_broken <= 0.1")
    print("\n".join(lines))
    assert uncorrected_worst_side > 0.055  # why the correction
