"""What a system under test imports: the tool box its tools are dispatched through.

    from oloproof_pipeline.toolbox import ToolBox

A system whose tools go through a `ToolBox` gets its steps, checkpoints and constraints
recorded, and a working replay, without writing either (see `run/toolbox.py`).

With `system.simulated_user`, `simulated_user()` is the current case's simulated user:
`said = user.opening()`, then `said = user.reply(answer)` until it gives None
(see `run/simulated_user.py`).
"""

from .run.simulated_user import simulated_user
from .run.toolbox import StepLimitReached, ToolBox

__all__ = ["StepLimitReached", "ToolBox", "simulated_user"]
