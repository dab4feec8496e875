"""What a system under test imports: the tool box its tools are dispatched through.

    from oloproof_pipeline.toolbox import ToolBox

A system whose tools go through a `ToolBox` gets its steps, checkpoints and constraints
recorded, and a working replay, without writing either (see `run/toolbox.py`).
"""

from .run.toolbox import StepLimitReached, ToolBox

__all__ = ["StepLimitReached", "ToolBox"]
