"""`python -m oloproof_pipeline`: this project's command, whichever `oloproof` script is on PATH."""

from .cli import main

main()
