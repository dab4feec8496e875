"""`python -m oloproof_pipeline.cli`: the `oloproof` command."""

from . import main

main()
