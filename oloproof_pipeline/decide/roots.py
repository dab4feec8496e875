"""The root of a monotone function between two points where its signs differ: what the
intervals here solve for, without `scipy.optimize` (its import adds ~0.13 s to every start)."""

from __future__ import annotations


def monotone_root(function, low: float, high: float, tolerance: float = 1e-13) -> float:
    """The root of a monotone `function` whose signs differ at `low` and `high`, by the
    Illinois variant of regula falsi (always bracketed, superlinear on smooth tails)."""
    f_low, f_high = float(function(low)), float(function(high))
    side = 0
    while high - low > tolerance:
        guess = (low * f_high - high * f_low) / (f_high - f_low)
        if not low < guess < high:
            guess = (low + high) / 2.0
        f_guess = float(function(guess))
        if f_guess == 0.0:
            return float(guess)
        if (f_guess > 0.0) == (f_high > 0.0):
            high, f_high = guess, f_guess
            if side == -1:
                f_low /= 2.0  # the same end kept twice: halve it so the next guess moves
            side = -1
        else:
            low, f_low = guess, f_guess
            if side == 1:
                f_high /= 2.0
            side = 1
    return float((low + high) / 2.0)
