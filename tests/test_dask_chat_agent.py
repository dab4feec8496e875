"""`execution.workers` with a model-driven agent: the chat-agent example against its stand-in
model (a real HTTP server on 127.0.0.1, started by the test) run inline and on two Dask
sandboxes (a real LocalCluster: its scheduler and two worker processes), giving the same
verdicts. A chat agent's settings are a dict: a Dask worker keeping one sandbox per
settings once failed every case on them (`unhashable type: 'dict'`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import yaml
from dagster import DagsterInstance

from oloproof_pipeline.defs.launch import run_evaluation
from oloproof_pipeline.store.layout import table_path

from test_chat_agent import EXAMPLE, VERSION, configure, standin  # noqa: F401 (the stand-in fixture)

# Two sources of each answer the desk gives, with their copies: 12 cases, every path.
CASES = ["ord-001", "ord-002", "ord-005", "ord-006"]


def desk_copy(tmp_path: Path, name: str, url: str, *, workers: int | None = None) -> Path:
    root = tmp_path / name
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".oloproof", "__pycache__"))
    configure(root, url, cases=CASES)
    if workers is not None:
        config = yaml.safe_load((root / "oloproof.yaml").read_text())
        config["execution"]["workers"] = workers
        (root / "oloproof.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return root


def evaluate(root: Path, tmp_path: Path) -> None:
    home = tmp_path / f"{root.name}_instance"
    home.mkdir()
    with DagsterInstance.local_temp(tempdir=str(home)) as instance:
        evaluation = run_evaluation(root, instance=instance)
    assert evaluation.errors == [] and evaluation.success


def verdict_rows(root: Path) -> pd.DataFrame:
    verdicts = pd.read_parquet(table_path(root, "verdicts", VERSION))
    return verdicts[["case_id", "criterion", "outcome", "reason"]].sort_values(["case_id", "criterion"]).reset_index(drop=True)


def test_a_chat_agent_on_two_dask_sandboxes_gives_the_inline_verdicts(tmp_path, standin):  # noqa: F811
    inline = desk_copy(tmp_path, "inline", standin.url)
    evaluate(inline, tmp_path)
    inline_requests = len(standin.requests)

    on_dask = desk_copy(tmp_path, "on_dask", standin.url, workers=2)
    evaluate(on_dask, tmp_path)

    runs = pd.read_parquet(table_path(on_dask, "recorded_runs", VERSION))
    assert len(runs) == 12 and set(runs["status"]) == {"ok"}, runs["error"].dropna().tolist()
    assert (runs["model_calls"] >= 2).all()
    pd.testing.assert_frame_equal(verdict_rows(inline), verdict_rows(on_dask))
    assert set(verdict_rows(on_dask)["outcome"]) >= {"PASS"}
    # The same conversations: as many model requests on Dask as inline (recordings and replays).
    assert len(standin.requests) == 2 * inline_requests
    inline_gate = pd.read_parquet(table_path(inline, "gate", VERSION))
    dask_gate = pd.read_parquet(table_path(on_dask, "gate", VERSION))
    assert list(inline_gate["decision"]) == list(dask_gate["decision"])
