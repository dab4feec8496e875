"""Importers: other benchmarks' suites written out as evaluation projects (`oloproof import`).
Each benchmark's package is imported only by its own modules here (an extra of its own)."""
