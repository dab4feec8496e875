"""The cyclic garbage collector held off where it only costs: decoding stored rows, and
importing modules. Imports nothing but the standard library, so the CLI can hold it off
before its first heavy import (pandas, pydantic)."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def collection_paused() -> Iterator[None]:
    """The collector held off meanwhile. Decoding makes tens of thousands of dicts, lists and
    models and no cycle among them, yet each few hundred it makes set off a collection, and
    every so often one of the whole heap: at 2,400 cases they cost about as much as parsing. A
    collection after finds whatever it would. Nested, the outermost turns it back on."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


@contextmanager
def imported_aside() -> Iterator[None]:
    """Imports made with the collector held off (Dagster, pandas, pyarrow and scipy make over
    a million objects and next to no garbage: its passes over them were about a fifth of the
    imports' time), and what they made then set aside from its later full passes
    (`gc.freeze`). Modules live as long as the process, so nothing is kept that a collection
    would have freed."""
    with collection_paused():
        try:
            yield
        finally:
            gc.freeze()
