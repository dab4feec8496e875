"""Each asset (and each version partition) as one Parquet file under `.oloproof/tables/`,
laid out as `store/layout.py` says (`table_path`), written and read by its functions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from dagster import ConfigurableIOManagerFactory, InputContext, MetadataValue, OutputContext, UPathIOManager
from upath import UPath

from ..store.assembly import AssembledTable
from ..store.layout import WritesParquet, read_table_file, touch_table_file, write_table_file
from ..store.tables import return_freed_memory


class ParquetFiles(UPathIOManager):
    """`<base>/<asset>.parquet`, or `<base>/<asset>/<version>.parquet` for partitioned assets."""

    extension = ".parquet"

    def dump_to_path(self, context: OutputContext, obj: pd.DataFrame | WritesParquet, path: UPath) -> None:
        # A frame, or a table that writes itself a row group at a time (store/assembly.py).
        target = Path(str(path))
        if isinstance(obj, AssembledTable) and obj.kept_at(target):
            touch_table_file(target)  # every row reused in place: the same bytes, written now
        else:
            write_table_file(target, obj)
        self._written = target
        if isinstance(obj, AssembledTable):
            obj.let_go()  # written: nothing reads its rows again
        return_freed_memory()  # the stage is done: what it built and dropped goes back

    def get_metadata(self, context: OutputContext, obj: Any) -> dict[str, MetadataValue]:
        """The file written, as a path value (the UI shows it with a copy button)."""
        written = getattr(self, "_written", None)
        return {"path": MetadataValue.path(str(written.resolve()))} if written else {}

    def load_from_path(self, context: InputContext, path: UPath) -> pd.DataFrame:
        return read_table_file(Path(str(path)))

    def get_asset_relative_path(self, context: InputContext | OutputContext) -> UPath:
        # The project's tables are named without the code location's key prefix.
        return UPath(context.asset_key.path[-1])


class ParquetIOManager(ConfigurableIOManagerFactory):
    base_path: str

    def create_io_manager(self, context) -> ParquetFiles:
        return ParquetFiles(base_path=UPath(self.base_path))
