"""oloproof_pipeline: judge tool-using agents by the world they leave behind.

The core (this package, minus `defs` and `cli`) has no Dagster import: project files,
digests, the sandbox runner, evaluators, statistics and the gate are plain Python.
"""

__version__ = "0.1.0"
