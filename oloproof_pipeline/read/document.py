"""The `--json` documents: a version's stored gate, each rule, and what a run did, as plain
data (no rendering), so the CLI, the report and Dagster's metadata say the same thing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..model.config import NO_RELEASE_POLICY
from ..model.outcomes import BLOCK, EXIT_ALLOW, EXIT_INCOMPLETE, EXIT_MEANINGS, EXIT_USAGE, OUTCOMES, exit_code_for
from ..store.layout import read_table
from ..store.stored import StoredTable
from ..store.tables import GATE_NESTED, rows_from_frame
from .reports import report_path, stored_trials
from .results import stored_outcome_counts
from .spend import SPEND_COLUMNS, VersionSpend, version_spend


@dataclass(frozen=True)
class StoredGate:
    """A version's stored gate: one row per rule (none when judged with no release policy)."""

    rows: list[dict]
    decision: str
    reasons: list[str]
    exit_code: int


def stored_gate(project_root: Path, version: str) -> StoredGate | None:
    """The gate stored for `version`; None when there is none."""
    frame = read_table(project_root, "gate", version)
    if frame is None:
        return None
    rows = rows_from_frame(frame, GATE_NESTED)
    if not rows:  # judged with no release policy: nothing was decided, so nothing is allowed
        return StoredGate(rows, BLOCK, [NO_RELEASE_POLICY], EXIT_USAGE)
    return StoredGate(rows, rows[0]["gate_decision"], rows[0]["gate_reasons"], exit_code_for(row["decision"] for row in rows))


def gate_document(project_root: Path, version: str, gate: StoredGate, *, ungated: bool = False) -> dict[str, Any]:
    """The stored gate as `gate --json` prints it: the version, the run that decided it, the
    gate, and each rule's decision, rate, interval, method, bar, counts and reasons. A run
    asked to be `--ungated` decided nothing and ends with 0, as it does without --json."""
    decision, exit_code = gate.decision, gate.exit_code
    if not gate.rows and ungated:
        decision, exit_code = None, EXIT_ALLOW
    trials = stored_trials(project_root, version)
    return {
        "version": version,
        "run_id": gate.rows[0]["judged_by_run"] if gate.rows else None,
        "gate": {"decision": decision, "exit_code": exit_code,
                 "meaning": EXIT_MEANINGS[exit_code] if gate.rows else NO_RELEASE_POLICY, "reasons": gate.reasons},
        "rules": [rule_document(row) for row in gate.rows],
        # Only with repeated trials, so a document of one trial is as it always was.
        **({"trials": [summary.model_dump(mode="json") for summary in trials]} if trials else {}),
    }


def rule_document(row: dict) -> dict[str, Any]:
    return {
        "rule_id": row["rule_id"],
        "metric": row["metric"],
        "decision": row["decision"],
        "rate": row["estimate"],
        "interval": {"lower": row["lower"], "upper": row["upper"]},
        "method": row["method"],
        "bar": {"kind": row["bar_kind"], "min": row["bar_min"], "max": row["bar_max"]},
        "counts": {
            "passed": row["passed"],
            "failed": row["failed"],
            "judged": row["observed"],
            "missing": row["missing"],
            "excluded": row["excluded"],
        },
        "reasons": row["reasons"] or [],
        "suite_size_to_decide": None if row["suite_size_to_decide"] is None else int(row["suite_size_to_decide"]),
    }


# How the stages say a case had nothing stored to reuse (run/recording.py, run/replaying.py,
# evaluators/judging.py).
NEW_CASE = ": new case"


class RunSummary:
    """What a run did, read from its materializations' metadata (asset name -> values): cases
    recorded and reused, replays run and reused, verdicts judged, and where to look next.
    `dagster_dev` is the command that opens the run's instance in Dagster."""

    def __init__(self, project_root: Path, version: str, metadata: dict[str, dict[str, Any]], *, dagster_dev: str,
                 first_of_version: bool = False):
        self.project_root = project_root
        self.version = version
        self.metadata = metadata
        self.dagster_dev = dagster_dev
        # Nothing was stored for the version before this run: every case is new to it.
        self.first_of_version = first_of_version

    def _value(self, asset: str, key: str, default: Any = 0) -> Any:
        return self.metadata.get(asset, {}).get(key, default)

    def counts(self) -> dict[str, Any]:
        stored = StoredTable.at(self.project_root, "verdicts", partition=self.version)
        verdicts = stored_outcome_counts(stored) if stored.exists else {}
        return {
            "cases_recorded": self._value("recorded_runs", "cases_new"),
            "cases_reused": self._value("recorded_runs", "cases_reused"),
            "cases_failed": self._value("recorded_runs", "cases_failed"),
            "replays_run": self._value("fault_replays", "replays_new"),
            "replays_reused": self._value("fault_replays", "replays_reused"),
            "replays_failed": self._value("fault_replays", "replays_failed"),
            "verdicts_judged": self._value("verdicts", "verdicts_judged"),
            "verdicts_reused": self._value("verdicts", "verdicts_reused"),
            "verdicts": {outcome: sum(tally.get(outcome, 0) for tally in verdicts.values()) for outcome in OUTCOMES},
        }

    def why(self) -> list[str]:
        """Why anything was recorded, replayed, judged or decided again, in the order the assets
        ran. On a version's first run a case is new because the version is: that is said."""
        lines = [line for values in self.metadata.values() for line in values.get("why", [])]
        if not self.first_of_version:
            return lines
        return [line.removesuffix(NEW_CASE) + f": first run of version {self.version}" if line.endswith(NEW_CASE) else line
                for line in lines]

    def complete(self) -> bool:
        """Every case and replay recorded: a rerun would have nothing to retry (the run's own
        metadata says; the stored verdicts need not be read for it)."""
        return not (self._value("recorded_runs", "cases_failed") or self._value("fault_replays", "replays_failed"))

    def report_path(self) -> str | None:
        path = report_path(self.project_root, self.version)
        return str(path) if path.is_file() else None

    def spend(self) -> VersionSpend:
        """The version's model calls, tokens and cost, over its stored recordings."""
        runs = StoredTable.at(self.project_root, "recorded_runs", partition=self.version).readable("its model use is not summed")
        return version_spend(runs.columns(*SPEND_COLUMNS) if runs.exists else None)

    def document(self) -> dict[str, Any]:
        return {"counts": self.counts(), "spend": self.spend().as_json(), "why": self.why(), "report": self.report_path(),
                "dagster_dev": self.dagster_dev}


def run_document(gate: dict[str, Any], run_id: str, summary: RunSummary, *, why: list[str] | None = None) -> dict[str, Any]:
    """What `run --json` prints after a run (or for the run a rerun with nothing changed
    reuses, with `why` saying so): the gate document, the run, its counts and where to look."""
    document = {**gate, "run_id": run_id, **summary.document()}
    return document if why is None else {**document, "why": why}


def failed_run_document(
    version: str, run_id: str, errors: list[str], summary: RunSummary, exit_code: int = EXIT_INCOMPLETE
) -> dict[str, Any]:
    """What `run --json` prints for a run that failed: no gate, the errors, and exit code 5
    (2 when the project was found wrong mid-run)."""
    return {"version": version, "run_id": run_id, "gate": None, "rules": [], "errors": errors,
            "exit_code": exit_code, **summary.document()}
