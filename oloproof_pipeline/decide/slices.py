"""Slices: each criterion's rate per bucket of cases, for exploring where an agent does worse.

`oloproof.yaml` `slices` names them: `tool_calls:1,2` and `trajectory_length:2,4` bucket the
cases by the tool calls or steps of their recording (`le_1`, `le_2`, `gt_2`), `metadata.<key>`
by a metadata value as it is. Per bucket and criterion: passed, failed, missing, support, and a
Clopper-Pearson interval once support reaches `min_slice_support`. A bucket is tested against
the rest of its criterion's cases (Fisher's exact test on PASS/FAIL), and Benjamini-Yekutieli
at FDR 0.1 across every distinct test of the table marks the buckets that differ (the two
buckets of a two-bucket split share one test). Exploratory: nothing
here is gated, and no curve is fitted across buckets.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import Any, Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from ..model.outcomes import EXCLUDED, FAIL, MISSING, PASS
from ..model.cases import CaseRecord
from ..model.config import Project
from ..model.digests import canonical_json
from ..model.fingerprints import settings_hash
from ..model.records import RecordedRun
from ..model.paths import split_path
from ..model.slicing import SliceSpec, parse_slice_spec
from ..store.arrow_bytes import update_with_groups
from ..store.reuse import Reuse, stored_if_digest
from ..store.stored import StoredTable
from ..store.tables import SLICES_SCHEMA, frame_from_rows, from_json_text, null_to_none, rows_from_frame
from .fisher import fisher_exact_p_value
from .formatting import format_rate
from .statistics import benjamini_yekutieli, exact_rate

SLICE_FDR = 0.1
NO_VALUE = "(none)"  # the bucket of cases whose metadata lacks the key
UNRECORDED = "unrecorded"  # the bucket of cases with no trajectory to count


def numeric_bucket(value: int, bounds: Iterable[int]) -> str:
    """`le_<bound>` for the first bound the value does not exceed, else `gt_<last bound>`."""
    bounds = list(bounds)
    for bound in bounds:
        if value <= bound:
            return f"le_{bound}"
    return f"gt_{bounds[-1]}"


# A slice's key split once, not once per case it buckets.
_keys_of = lru_cache(maxsize=256)(split_path)


def metadata_value(metadata: dict[str, Any] | None, key: str) -> str:
    value: Any = metadata or {}
    for part in _keys_of(key):
        if not isinstance(value, dict) or part not in value:
            return NO_VALUE
        value = value[part]
    return value if isinstance(value, str) else canonical_json(value)


@dataclass(frozen=True)
class CaseFacts:
    """What slicing reads of one case: its metadata, and the counts of its recording."""

    metadata: dict[str, Any] | None = None
    tool_calls: int | None = None  # None: no trajectory recorded
    steps: int | None = None


def facts_of(case: CaseRecord | None, run: RecordedRun | None) -> CaseFacts:
    trajectory = run.trajectory if run is not None else None
    return CaseFacts(
        metadata=case.metadata if case is not None else None,
        tool_calls=len(trajectory.tool_calls()) if trajectory is not None else None,
        steps=len(trajectory.steps) if trajectory is not None else None,
    )


@dataclass
class CaseBuckets:
    """Each case's bucket on each slice, as small integer codes (a label once, however many
    cases share it): per slice, a code per case position, then one more for a case judged but
    not known (its facts unknown). What counting the verdicts needs, and no case's metadata
    or trajectory beyond the one being bucketed."""

    specs: list[SliceSpec]
    case_ids: pd.Index
    codes: list[np.ndarray]
    labels: list[list[str]]

    @classmethod
    def of(cls, specs: list[SliceSpec], case_ids: list[Any], facts: Iterable[CaseFacts]) -> "CaseBuckets":
        """From each case's facts (in `case_ids` order, ids unique)."""
        interned: list[dict[str, int]] = [{} for _ in specs]
        codes = [[] for _ in specs]
        for each in chain(facts, [CaseFacts()]):  # one case's facts at a time
            for spec, labels, slice_codes in zip(specs, interned, codes):
                slice_codes.append(labels.setdefault(case_bucket(spec, each), len(labels)))
        return cls(specs, pd.Index(case_ids, dtype=object), [np.asarray(each, dtype=np.int64) for each in codes], [list(labels) for labels in interned])

    def positions(self, case_ids: pd.Series) -> np.ndarray:
        """Per case id, its position (the unknown slot for an id not among the cases)."""
        found = self.case_ids.get_indexer(case_ids.astype(object))
        return np.where(found < 0, len(self.case_ids), found)


def buckets_of_facts(specs: list[SliceSpec], facts: dict[str, CaseFacts]) -> CaseBuckets:
    return CaseBuckets.of(specs, list(facts), facts.values())


def buckets_from_tables(specs: list[SliceSpec], cases: StoredTable, runs: StoredTable) -> CaseBuckets:
    """Each case's buckets, from the `case_id` and `metadata` columns of the cases and the
    `case_id` and `trajectory` columns of the recordings (JSON text): no case or run models
    needed, each recording's trajectory parsed (a row group at a time) only to count its steps
    and tool calls, each case's metadata only to bucket it."""
    read = cases.columns("case_id", "metadata")
    # A case id twice (the table should have none): its last row, as a dict by id would keep.
    last = ~read["case_id"].duplicated(keep="last").to_numpy()
    case_ids = pd.Index(read["case_id"][last].astype(object))
    metadata = null_to_none(read["metadata"][last])
    del read
    tool_calls, steps = np.full(len(case_ids), -1, dtype=np.int64), np.full(len(case_ids), -1, dtype=np.int64)
    if runs.exists and len(runs):
        for group in runs.row_groups().each(["case_id", "trajectory"]):
            at = case_ids.get_indexer(group.column("case_id").to_pandas().astype(object)) if group.num_rows else []
            for position, text in zip(at, group.column("trajectory").to_pylist() if "trajectory" in group.column_names else []):
                if position >= 0 and isinstance(text, str):
                    parsed = from_json_text(text).get("steps") or []  # pydantic-core's parser: json.loads's values, faster
                    tool_calls[position], steps[position] = sum(step.get("kind") == "tool_call" for step in parsed), len(parsed)
    facts = (
        CaseFacts(from_json_text(text) if isinstance(text, str) else None, *((int(calls), int(count)) if count >= 0 else (None, None)))
        for text, calls, count in zip(metadata, tool_calls.tolist(), steps.tolist())
    )
    return CaseBuckets.of(specs, case_ids, facts)


def case_bucket(spec: SliceSpec, facts: CaseFacts) -> str:
    if spec.kind == "metadata":
        return metadata_value(facts.metadata, spec.key or "")
    count = facts.tool_calls if spec.kind == "tool_calls" else facts.steps
    return UNRECORDED if count is None else numeric_bucket(count, spec.bounds)


# -- rates per bucket ----------------------------------------------------------------------


class SliceRow(BaseModel):
    """One bucket of one slice on one criterion: a row of the `slices` table."""

    model_config = ConfigDict(extra="forbid")

    slice: str
    bucket: str
    criterion: str
    passed: int
    failed: int
    missing: int
    support: int
    estimate: float | None
    lower: float | None = None
    upper: float | None = None
    method: str | None = None
    whole_estimate: float | None
    # Fisher's exact test of this bucket against the rest; None when not tested.
    p_value: float | None = None
    # Benjamini-Yekutieli's mark across the whole table; None when not tested.
    differs: bool | None = None
    min_slice_support: int

    @property
    def tested(self) -> bool:
        return self.p_value is not None


def _rate(passed: int, failed: int) -> float | None:
    return passed / (passed + failed) if passed + failed else None


def _bucket_order(spec: SliceSpec, found: Iterable[str]) -> list[str]:
    """Numeric buckets in bound order (empty ones too); metadata values sorted; odd ones last."""
    found = set(found)
    if spec.kind == "metadata":
        return sorted(value for value in found if value != NO_VALUE) + ([NO_VALUE] if NO_VALUE in found else [])
    return spec.bucket_labels() + ([UNRECORDED] if UNRECORDED in found else [])


def _fisher_p_value(bucket: Counter, rest: Counter) -> float:
    table = [[bucket[PASS], bucket[FAIL]], [rest[PASS], rest[FAIL]]]
    return fisher_exact_p_value(table)


def slice_rows(
    specs: list[SliceSpec],
    verdicts: pd.DataFrame,
    cases: dict[str, CaseRecord],
    runs: dict[str, RecordedRun],
    *,
    min_support: int,
    confidence: float = 0.95,
    fdr: float = SLICE_FDR,
) -> list[SliceRow]:
    """Every slice's buckets on every criterion, from the cases each criterion judged
    (EXCLUDED verdicts count nowhere), then the BY marks across all tested buckets."""
    facts = {case_id: facts_of(cases.get(case_id), runs.get(case_id)) for case_id in set(cases) | set(runs)}
    return slice_rows_of(specs, verdicts, facts, min_support=min_support, confidence=confidence, fdr=fdr)


def slice_rows_of(
    specs: list[SliceSpec],
    verdicts: pd.DataFrame,
    facts: dict[str, CaseFacts],
    *,
    min_support: int,
    confidence: float = 0.95,
    fdr: float = SLICE_FDR,
) -> list[SliceRow]:
    """`slice_rows` from each case's facts."""
    return slice_rows_by_bucket(verdicts, buckets_of_facts(specs, facts), min_support=min_support, confidence=confidence, fdr=fdr)


def slice_rows_by_bucket(
    verdicts: pd.DataFrame | Iterable[pa.Table],
    buckets: CaseBuckets,
    *,
    min_support: int,
    confidence: float = 0.95,
    fdr: float = SLICE_FDR,
) -> list[SliceRow]:
    """`slice_rows` from each case's buckets (on their slices), over the verdicts as a frame or
    a row group at a time (`case_id`, `criterion`, `outcome`). The verdicts are counted as codes
    (criterion, bucket, outcome), never a Python string per verdict (`JudgedCodes`)."""
    judged = JudgedCodes.of([verdicts] if isinstance(verdicts, pd.DataFrame) else verdicts, buckets)
    positions, criterion_codes, outcome_codes = judged.positions, judged.criterion_codes, judged.outcome_codes
    criteria, outcomes = judged.criteria, judged.outcomes
    rows: list[SliceRow] = []
    for spec, case_codes, labels in zip(buckets.specs, buckets.codes, buckets.labels):
        keys = (criterion_codes * len(labels) + case_codes[positions]) * len(outcomes) + outcome_codes
        by_criterion: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
        found, counts = np.unique(keys, return_counts=True)
        for key, count in zip(found.tolist(), counts.tolist()):
            rest, outcome = divmod(key, len(outcomes))
            criterion, bucket = divmod(rest, len(labels))
            by_criterion[criteria[criterion]][labels[bucket]][outcomes[outcome]] = count
        for criterion in criteria:
            outcomes_by_bucket = by_criterion[criterion]
            whole = sum(outcomes_by_bucket.values(), Counter())
            for bucket in _bucket_order(spec, outcomes_by_bucket):
                rows.append(_bucket_row(spec, criterion, bucket, outcomes_by_bucket[bucket], whole, min_support, confidence))
    return _mark_differences(rows, fdr)


def _codes(values: pd.Series) -> tuple[np.ndarray, list[Any]]:
    """Each value's code, and the distinct values in the order they first appear (a null as None)."""
    codes, distinct = pd.factorize(values, use_na_sentinel=False)
    return codes.astype(np.int64), null_to_none(pd.Series(distinct, dtype=object))


@dataclass
class JudgedCodes:
    """The judged verdicts (an EXCLUDED one counts nowhere) as codes: per verdict its case's
    position among the buckets' cases, its criterion's and its outcome's code, each code an
    index into `criteria` / `outcomes` (every one met, in the order they first appear)."""

    positions: np.ndarray
    criterion_codes: np.ndarray
    outcome_codes: np.ndarray
    criteria: list[Any]
    outcomes: list[Any]

    @classmethod
    def of(cls, groups: Iterable[pd.DataFrame | pa.Table], buckets: CaseBuckets) -> "JudgedCodes":
        """From the verdicts a group of rows at a time: only a group's text is held at once."""
        criteria: dict[Any, int] = {}
        outcomes: dict[Any, int] = {}
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for group in groups:
            frame = group if isinstance(group, pd.DataFrame) else group.to_pandas()
            judged = (frame["outcome"] != EXCLUDED).to_numpy(dtype=bool)
            # Coded before the EXCLUDED are dropped: a criterion that judged nothing still has its (empty) buckets.
            criterion_codes, outcome_codes = _codes_among(frame["criterion"], criteria), _codes_among(frame["outcome"], outcomes)
            parts.append((buckets.positions(frame["case_id"][judged]), criterion_codes[judged], outcome_codes[judged]))
        joined = [np.concatenate(each) for each in zip(*parts)] or [np.zeros(0, np.int64)] * 3
        return cls(*joined, list(criteria), list(outcomes))


def _codes_among(values: pd.Series, seen: dict[Any, int]) -> np.ndarray:
    """Each value's code among `seen` (values met before, in order; new ones are added)."""
    codes, distinct = _codes(values)
    mapped = np.array([seen.setdefault(value, len(seen)) for value in distinct], dtype=np.int64)
    return mapped[codes] if len(codes) else np.zeros(0, np.int64)


def _bucket_row(
    spec: SliceSpec, criterion: str, bucket: str, counts: Counter, whole: Counter, min_support: int, confidence: float
) -> SliceRow:
    passed, failed, missing = counts[PASS], counts[FAIL], counts[MISSING]
    support = passed + failed + missing
    row = SliceRow(
        slice=spec.text, bucket=bucket, criterion=criterion, passed=passed, failed=failed, missing=missing,
        support=support, estimate=_rate(passed, failed), whole_estimate=_rate(whole[PASS], whole[FAIL]),
        min_slice_support=min_support,
    )
    if support < min_support:
        return row  # too few cases for an interval or a test
    interval = exact_rate(passed, failed, missing, confidence)
    row.lower, row.upper, row.method = interval.lower, interval.upper, interval.method
    rest = whole - counts
    if passed + failed and rest[PASS] + rest[FAIL]:
        row.p_value = _fisher_p_value(counts, rest)
    return row


def _mark_differences(rows: list[SliceRow], fdr: float) -> list[SliceRow]:
    hypotheses = distinct_tests(rows)
    for marked, differs in zip(hypotheses, benjamini_yekutieli([marked[0].p_value for marked in hypotheses], fdr=fdr)):
        for row in marked:
            row.differs = differs
    return rows


def distinct_tests(rows: list[SliceRow]) -> list[list[SliceRow]]:
    """The distinct Fisher tests among the tested rows, each with the rows it marks. Where a
    slice's judged cases of a criterion fall in exactly two buckets, "A against the rest" and
    "B against the rest" are one test (the same table with its rows swapped, so the same
    p-value): it enters Benjamini-Yekutieli once and marks both rows, so m counts tests, not
    rows (entering it twice only doubled m, a needless loss of power)."""
    by_table: dict[tuple[str, str], list[SliceRow]] = defaultdict(list)
    for row in rows:
        by_table[(row.slice, row.criterion)].append(row)
    hypotheses: list[list[SliceRow]] = []
    for table_rows in by_table.values():
        tested = [row for row in table_rows if row.tested]
        judged = [row for row in table_rows if row.passed + row.failed]
        if len(tested) == 2 and len(judged) == 2:
            hypotheses.append(tested)
        else:
            hypotheses.extend([row] for row in tested)
    return hypotheses


def project_slices_of(project: Project, verdicts: pd.DataFrame | Iterable[pa.Table], buckets: CaseBuckets) -> list[SliceRow]:
    """The project's slices over one version's verdicts, from each case's buckets (made on the
    project's slices, in their order)."""
    return slice_rows_by_bucket(
        verdicts,
        buckets,
        min_support=project.config.min_slice_support,
        confidence=project.release.confidence_level,
    )


# -- reuse ---------------------------------------------------------------------------------

# What the slices are computed from, of each verdict: its key covers its case (metadata) and
# recording (the counts), so these columns and the settings decide every slice row.
SLICED_VERDICT_COLUMNS = ["case_id", "criterion", "outcome", "inputs_key"]


def slices_inputs_digest(project: Project, verdicts: StoredTable) -> str:
    """What the slices are computed from: the settings, and the verdicts' sliced columns read
    a row group at a time, digested from their Arrow buffers (`update_with_groups`)."""
    settings = {
        "slices": project.config.slices,
        "min_support": project.config.min_slice_support,
        "confidence": project.release.confidence_level,
        "fdr": SLICE_FDR,
    }
    hashed = settings_hash("slices/v2", settings, producer="decisions")
    update_with_groups(hashed, verdicts.row_groups().each(SLICED_VERDICT_COLUMNS))
    return "sha256:" + hashed.hexdigest()


def slices_of_version(
    project: Project, stored: dict[str, StoredTable], version: str, *, run_id: str
) -> tuple[pd.DataFrame, list[SliceRow], Reuse]:
    """The version's slices table and rows from its stored verdicts and recordings (`stored`
    as `store.reuse.stored_tables` gives them), computed again only when their inputs changed;
    with the reuse (whether, and why not). The verdicts are read a row group at a time, for
    the digest and then, if the slices are computed, for their codes."""
    verdicts = stored["verdicts"]
    inputs_digest = slices_inputs_digest(project, verdicts)
    reuse = stored_if_digest(
        stored["slices"], inputs_digest, table="slices", made="slices computed", again_because="their verdicts or settings changed"
    )
    if reuse.frame is not None:
        return reuse.frame, slices_from_table(reuse.frame), reuse
    specs = [parse_slice_spec(text) for text in project.config.slices]
    buckets = buckets_from_tables(specs, stored["cases"], stored["recorded_runs"])
    rows = project_slices_of(project, verdicts.row_groups().each(["case_id", "criterion", "outcome"]), buckets)
    return slice_table(rows, version=version, sliced_by_run=run_id, inputs_digest=inputs_digest), rows, reuse


def slices_from_table(frame: pd.DataFrame) -> list[SliceRow]:
    fields = [name for name in SliceRow.model_fields if name in frame.columns]
    return [SliceRow.model_validate(row) for row in rows_from_frame(frame[fields])]


# -- tables and Markdown -------------------------------------------------------------------


def slice_table(rows: list[SliceRow], *, version: str, sliced_by_run: str | None, inputs_digest: str | None = None) -> pd.DataFrame:
    extra = {"system_version": version, "sliced_by_run": sliced_by_run, "inputs_digest": inputs_digest}
    return frame_from_rows([{**row.model_dump(mode="json"), **extra} for row in rows], SLICES_SCHEMA)


def _number(value: float | None) -> str:
    return format_rate(value)


def _mark(row: SliceRow) -> str:
    if row.differs is None:
        return "not tested"
    if not row.differs:
        return "-"
    direction = "higher" if (row.estimate or 0.0) > (row.whole_estimate or 0.0) else "lower"
    return f"**differs** ({direction})"


def slices_markdown(rows: list[SliceRow], fdr: float = SLICE_FDR) -> str:
    tests = len(distinct_tests(rows))
    lines = [
        f"Exploratory, never gated. Buckets with support below min_slice_support get no interval and no test; "
        f"Benjamini-Yekutieli at FDR {fdr:g} across all {tests} tests marks buckets that differ from the rest.",
        "",
        "| slice | bucket | criterion | rate | interval | support (P/F/M) | whole | mark |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        interval = "-" if row.lower is None else f"[{_number(row.lower)}, {_number(row.upper)}]"
        lines.append(
            f"| {row.slice} | {row.bucket} | {row.criterion} | {_number(row.estimate)} | {interval} "
            f"| {row.support} ({row.passed}/{row.failed}/{row.missing}) | {_number(row.whole_estimate)} | {_mark(row)} |"
        )
    if not rows:
        lines.append("| - | - | - | - | - | - | - | no slices configured |")
    return "\n".join(lines) + "\n"
