"""What a command pays to start beyond loading its code: the garbage collector's passes over
the objects its imports make (Dagster, pandas, pyarrow and scipy are over a million, and
make next to no garbage), about a fifth of the imports' time."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def imported_aside() -> Iterator[None]:
    """The imports made inside run with the collector held off, and what they made is then
    set aside from its later full passes (`gc.freeze`), as the launch sets aside what it holds
    while a run executes: modules live as long as the process, so nothing is kept that a
    collection would have freed."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
