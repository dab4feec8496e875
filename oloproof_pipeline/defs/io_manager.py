"""Each asset (and each version partition) as one Parquet file under `.oloproof/tables/`."""

from __future__ import annotations

import uuid

import pandas as pd
from dagster import ConfigurableIOManagerFactory, InputContext, OutputContext, UPathIOManager
from upath import UPath


class ParquetFiles(UPathIOManager):
    """`<base>/<asset>.parquet`, or `<base>/<asset>/<version>.parquet` for partitioned assets."""

    extension = ".parquet"

    def dump_to_path(self, context: OutputContext, obj: pd.DataFrame, path: UPath) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write next to the target and rename, so a reader never sees half a file; the name
        # is the writer's own, as two runs of one version may write the same table at once.
        partial = path.with_name(f"{path.name}.{uuid.uuid4().hex}.partial")
        obj.to_parquet(str(partial), index=False)
        partial.rename(path)

    def load_from_path(self, context: InputContext, path: UPath) -> pd.DataFrame:
        return pd.read_parquet(str(path))

    def get_asset_relative_path(self, context: InputContext | OutputContext) -> UPath:
        # The project's tables are named without the code location's key prefix.
        return UPath(context.asset_key.path[-1])


class ParquetIOManager(ConfigurableIOManagerFactory):
    base_path: str

    def create_io_manager(self, context) -> ParquetFiles:
        return ParquetFiles(base_path=UPath(self.base_path))
