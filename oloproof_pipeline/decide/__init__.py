"""Decisions from verdicts: statistics, the release gate, transform validity and slices."""
