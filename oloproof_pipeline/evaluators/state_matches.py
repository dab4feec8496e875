"""`state_matches`: the state a case left behind against the case's `expected.state`.

The differences are DeepDiff's, found by a walk of our own that reports what DeepDiff reports
(DeepDiff itself runs only where lists differ); a walk over the expected leaves turns them into
one details row per compared path, so a person sees what matched as well as what did not. Dicts are walked
key by key (subset mode lets the actual state carry extra keys); anything else, lists included,
is one leaf compared whole and in order.

`match_rows_by` compares a table of row objects by a key field instead of by position, and
`ignore` leaves paths out of the comparison (see `state_views`). A keyed table named in the
expected state holds exactly its rows: a missing row and, in subset mode too, an extra row
(a waiver that should not exist) are differences, each shown as a row of the details; within
a row, the mode decides as everywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Iterator, Literal, Sequence

from pydantic import Field

from ..model.cases import CaseRecord
from ..model.records import RecordedRun
from ..model.outcomes import EXCLUDED, FAIL, MISSING, PASS, Verdict
from .base import CaseFindings, Evaluator, EvaluatorConfig, JudgingContext
from ..model.paths import ABSENT, DottedPath, absent_as_none, join_path, path_keys, quote_key, read_keys, read_path, split_glob_path
from .state_views import GlobPath, glob_matches, state_view

Mode = Literal["exact", "subset"]
ADDED = "dictionary_item_added"
# Float arithmetic puts 0.11 - 0.10 a hair above 0.01; the slack keeps "within 0.01" true to intent.
TOLERANCE_SLACK = 1e-9


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class NumbersWithin:
    """A DeepDiff operator: two numbers (never bools) are equal when within `tolerance`; 1 and
    1.0 are one JSON number."""

    def __init__(self, tolerance: float | None):
        self.tolerance = tolerance or 0.0

    def match(self, level: Any) -> bool:
        return is_number(level.t1) and is_number(level.t2)

    def give_up_diffing(self, level: Any, diff_instance: Any) -> bool:
        # True means "equal, stop here"; False lets DeepDiff report the change as it usually does.
        return abs(level.t1 - level.t2) <= self.tolerance * (1 + TOLERANCE_SLACK)


def differences(expected: Any, actual: Any, tolerance: float | None = None) -> list[tuple[str, list[Any], Any]]:
    """(DeepDiff report kind, key path, actual value there) for each difference. Added keys
    come in DeepDiff's order (the order rows are shown in); the other kinds in any order."""
    found: list[tuple[str, list[Any], Any]] = []
    try:
        _walk_differences(expected, actual, tolerance or 0.0, [], found)
    except _NeedsDeepDiff:
        return deepdiff_differences(expected, actual, tolerance)
    return found


def deepdiff_differences(expected: Any, actual: Any, tolerance: float | None = None) -> list[tuple[str, list[Any], Any]]:
    """`differences` as DeepDiff reports them (lists compared in order, as DeepDiff aligns them)."""
    # Imported here, not at start-up: importing DeepDiff takes about a second, and a run whose
    # compared states are dicts and plain values never needs it.
    from deepdiff import DeepDiff

    diff = DeepDiff(
        expected,
        actual,
        custom_operators=[NumbersWithin(tolerance)],
        # Otherwise a dict with many new keys is reported as one changed value, hiding which keys
        # were added (and subset mode must tell added keys from changed ones).
        threshold_to_diff_deeper=0,
    )
    return [(kind, level.path(output_format="list"), level.t2) for kind, levels in diff.tree.items() for level in levels]


# The types a stored state is made of: anything else (a tuple in a state made in memory) is
# left to DeepDiff, as is a list that differs (how DeepDiff aligns lists is its own).
JSON_TYPES = frozenset({dict, list, str, int, float, bool, type(None)})
REMOVED, VALUE_CHANGED, TYPE_CHANGED = "dictionary_item_removed", "values_changed", "type_changes"


class _NeedsDeepDiff(Exception):
    """The walk met what only DeepDiff reports faithfully."""


def _walk_differences(expected: Any, actual: Any, tolerance: float, keys: list[Any], found: list) -> None:
    """What DeepDiff (with `NumbersWithin`, diffing dicts ever deeper) reports, step for step:
    numbers within the tolerance are equal; then the same object; then another type is a type
    change; dicts report added keys (in the actual's order), removed keys, then recurse into
    the shared ones (in the actual's order), keys starting `__` left out as DeepDiff leaves
    them; equal lists report nothing."""
    if is_number(expected) and is_number(actual) and abs(expected - actual) <= tolerance * (1 + TOLERANCE_SLACK):
        return
    if expected is actual:
        return
    kind = type(expected)
    if kind not in JSON_TYPES or type(actual) not in JSON_TYPES:
        raise _NeedsDeepDiff
    if kind is not type(actual):
        found.append((TYPE_CHANGED, keys, actual))
    elif kind is dict:
        found.extend((ADDED, [*keys, key], value) for key, value in actual.items() if key not in expected and not _private(key))
        found.extend((REMOVED, [*keys, key], ABSENT) for key in expected if key not in actual and not _private(key))
        for key, value in actual.items():
            if key in expected and not _private(key):
                _walk_differences(expected[key], value, tolerance, [*keys, key], found)
    elif kind is list:
        if not _identical(expected, actual):
            raise _NeedsDeepDiff
    elif expected != actual:
        found.append((VALUE_CHANGED, keys, actual))


def _private(key: Any) -> bool:
    """A key DeepDiff leaves out of a comparison (its `ignore_private_variables`, on by default)."""
    return isinstance(key, str) and key.startswith("__")


def _identical(first: Any, second: Any) -> bool:
    """The same JSON value, of the same types throughout (so DeepDiff finds nothing to report)."""
    if first is second:
        return True
    kind = type(first)
    if kind is not type(second) or kind not in JSON_TYPES:
        return False
    if kind is dict:
        return first.keys() == second.keys() and all(_identical(value, second[key]) for key, value in first.items())
    if kind is list:
        return len(first) == len(second) and all(map(_identical, first, second))
    return first == second


def same_leaf(expected: Any, actual: Any, tolerance: float | None = None) -> bool:
    """Two values DeepDiff (with `NumbersWithin`) finds equal, told apart without it: numbers
    within the tolerance (1 and 1.0 are one JSON number), anything else of one type and equal
    (so `True` is not `1`). Containers are compared by the callers."""
    if is_number(expected) and is_number(actual):
        return abs(expected - actual) <= (tolerance or 0.0) * (1 + TOLERANCE_SLACK)
    return type(expected) is type(actual) and not isinstance(expected, (dict, list)) and expected == actual


def same_value(expected: Any, actual: Any, tolerance: float | None = None) -> bool:
    """Equal as JSON values, as DeepDiff would find them; a quick walk where most compared
    values are equal, so DeepDiff runs only to say where two values differ."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(same_value(value, actual[key], tolerance) for key, value in expected.items())
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(same_value(mine, theirs, tolerance) for mine, theirs in zip(expected, actual))
    return same_leaf(expected, actual, tolerance)


def values_equal(expected: Any, actual: Any, tolerance: float | None = None) -> bool:
    return same_value(expected, actual, tolerance) or not differences(expected, actual, tolerance)


def leaf_keys(value: Any, prefix: Sequence[str] = ()) -> list[list[str]]:
    """Key paths to every leaf of `value`. An empty dict is a leaf, so it is still compared."""
    if isinstance(value, dict) and value:
        return [leaf for key, child in value.items() for leaf in leaf_keys(child, [*prefix, key])]
    return [list(prefix)]


def leaf_count(value: Any) -> int:
    """`len(leaf_keys(value))`, without making the paths."""
    if isinstance(value, dict) and value:
        return sum(leaf_count(child) for child in value.values())
    return 1


def longer_path(path: str, key: Any) -> str:
    """`join_path` of a path's keys and `key`, from the path's text."""
    part = quote_key(key)
    return part if not path else path + (part if part.startswith("[") else f".{part}")


def state_row(keys: Sequence[Any], expected: Any, actual: Any, *, matched: bool) -> dict[str, Any]:
    return state_row_at(join_path(keys), expected, actual, matched=matched)


def state_row_at(path: str, expected: Any, actual: Any, *, matched: bool) -> dict[str, Any]:
    """`state_row` for a path already written (`join_path` of its keys)."""
    row = {"path": path, "expected": absent_as_none(expected), "actual": absent_as_none(actual), "matched": matched}
    if actual is ABSENT:
        row["absent"] = True
    if expected is ABSENT:
        row["expected_absent"] = True
    return row


class Differing:
    """The key paths that differ. A difference at, above or below a leaf makes that leaf
    differ: asked per leaf in a few set lookups, not by comparing it with each difference."""

    def __init__(self, differing: Iterable[Sequence[Any]]):
        self.at = {tuple(keys) for keys in differing}
        # Every path at or above a difference: a leaf there holds (or is) what differs.
        self.at_or_above = {keys[:length] for keys in self.at for length in range(len(keys) + 1)}

    def overlaps(self, leaf: tuple[Any, ...]) -> bool:
        return leaf in self.at_or_above or any(leaf[:length] in self.at for length in range(len(leaf)))


def _leaf_rows(expected: Any, actual: Any, keys: tuple[Any, ...], path: str, differing: Differing, rows: list[dict[str, Any]]) -> None:
    """A row per leaf of `expected` (in `leaf_keys` order) with the actual value there (as
    `read_keys` finds it), matched unless a difference overlaps it; in one walk, each path's
    text made from its parent's."""
    if isinstance(expected, dict) and expected:
        for key, child in expected.items():
            _leaf_rows(child, read_keys(actual, (key,)), (*keys, key), longer_path(path, key), differing, rows)
        return
    rows.append(state_row_at(path, expected, actual, matched=not differing.overlaps(keys)))


def first_difference(rows: list[dict[str, Any]]) -> str | None:
    """The path of the first unmatched row, for the verdict's reason."""
    return next((row["path"] or "(whole state)" for row in rows if not row["matched"]), None)


@dataclass(frozen=True)
class StateComparison:
    """How one selected subtree is compared: `exact` (extra keys differ) or `subset`."""

    mode: Mode = "exact"
    tolerance: float | None = None
    # Glob paths (split) of keyed row tables: an added row there differs even in subset mode.
    row_tables: tuple[tuple[str, ...], ...] = ()

    def is_row(self, keys: Sequence[Any]) -> bool:
        return bool(keys) and any(glob_matches(table, keys[:-1]) for table in self.row_tables)

    def tolerates_added(self, keys: Sequence[Any]) -> bool:
        return self.mode == "subset" and not self.is_row(keys)

    def agrees(self, expected: Any, actual: Any, keys: list[Any]) -> bool:
        """No difference at all, but for keys this comparison tolerates the actual state adding
        (subset mode): what DeepDiff would find, in one quick walk over the values."""
        if isinstance(expected, dict) and isinstance(actual, dict):
            if any(key not in actual for key in expected):
                return False
            if any(key not in expected and not self.tolerates_added([*keys, key]) for key in actual):
                return False
            return all(self.agrees(value, actual[key], [*keys, key]) for key, value in expected.items())
        if isinstance(expected, list) and isinstance(actual, list):
            return len(expected) == len(actual) and all(
                self.agrees(mine, theirs, [*keys, index]) for index, (mine, theirs) in enumerate(zip(expected, actual))
            )
        return same_leaf(expected, actual, self.tolerance)

    def _agreeing_rows(self, expected: Any, actual: Any, keys: list[Any], path: str, rows: list[dict[str, Any]]) -> bool:
        """`agrees` and, while it does, a matched row per leaf of `expected` (in `leaf_keys`
        order, each with the actual value there), in one walk over both values."""
        if isinstance(expected, dict) and isinstance(actual, dict) and expected:
            if any(key not in actual for key in expected):
                return False
            if any(key not in expected and not self.tolerates_added([*keys, key]) for key in actual):
                return False
            return all(
                self._agreeing_rows(value, actual[key], [*keys, key], longer_path(path, key), rows)
                for key, value in expected.items()
            )
        if not self.agrees(expected, actual, keys):
            return False
        rows.append({"path": path, "expected": expected, "actual": actual, "matched": True})
        return True

    def rows(self, path: str, expected: Any, actual: Any) -> list[dict[str, Any]]:
        base = list(path_keys(path))
        if expected is ABSENT or actual is ABSENT:
            return self._rows_with_absence(base, expected, actual)
        matched: list[dict[str, Any]] = []
        if self._agreeing_rows(expected, actual, base, join_path(base), matched):
            # Equal where compared: every leaf matched, and no diff is needed to say where not.
            return matched
        found = differences(expected, actual, self.tolerance)
        differing = [keys for kind, keys, _ in found if not (kind == ADDED and self.tolerates_added(base + keys))]
        rows: list[dict[str, Any]] = []
        _leaf_rows(expected, actual, (), join_path(base), Differing(differing), rows)
        rows += [
            state_row(base + keys, ABSENT, value, matched=False)
            for kind, keys, value in found
            if kind == ADDED and not self.tolerates_added(base + keys)
        ]
        return rows

    def _rows_with_absence(self, base: list[str], expected: Any, actual: Any) -> list[dict[str, Any]]:
        if expected is ABSENT:
            # Nothing there before and nothing there now is no change; something new is.
            return [state_row(base, ABSENT, actual, matched=actual is ABSENT)]
        return [state_row(base + leaf, read_keys(expected, leaf), ABSENT, matched=False) for leaf in leaf_keys(expected)]


def expected_state_of(case: CaseRecord, field: str = "state") -> Any:
    """The state a case expects: its `expected.<field>` (`state` unless configured)."""
    state = read_path(case.expected or {}, field)
    return ABSENT if state is None else state


@dataclass
class CasesNamed:
    """How many cases a problem is about, and the first few of them as a load error names them."""

    count: int = 0
    named: list[str] = field(default_factory=list)

    SHOWN = 3

    def add(self, case: CaseRecord) -> None:
        self.count += 1
        if len(self.named) < self.SHOWN:
            self.named.append(f"{case.case_id} ({case.file}:{case.line})" if case.file else case.case_id)

    def __str__(self) -> str:
        more = f" and {self.count - self.SHOWN} more" if self.count > self.SHOWN else ""
        return f"{self.count} case{'s' if self.count > 1 else ''}: {', '.join(self.named)}{more}"


class PathsNamingNothing(CaseFindings):
    """One load error per path that names nothing in every state given for a case (its
    starting and expected states): such a path would compare absent with absent. `worlds`
    gives each case the evaluator checks with its states; `paths_of` its paths."""

    def __init__(
        self, evaluator: Evaluator, worlds: Callable[[list[CaseRecord]], Iterable[tuple[CaseRecord, list[Any]]]],
        paths_of: Callable[[CaseRecord], list[str]],
    ):
        self.evaluator = evaluator
        self.worlds = worlds
        self.paths_of = paths_of
        self.cases_by_path: dict[str, CasesNamed] = {}

    def add(self, cases: list[CaseRecord]) -> None:
        for case, states in self.worlds(cases):
            for path in self.paths_of(case):
                if all(not isinstance(state, dict) or read_path(state, path) is ABSENT for state in states):
                    self.cases_by_path.setdefault(path, CasesNamed()).add(case)

    def problems(self) -> list[str]:
        evaluator = self.evaluator
        return [
            f"{evaluator.origin} ({evaluator.type} {evaluator.criterion}): path {path!r} names nothing in the starting "
            f"or expected state of {cases}; quote a key holding a dot (files[\"a.txt\"]), limit the "
            "evaluator with applies_to, or set absent_ok: true if the absence is the point"
            for path, cases in self.cases_by_path.items()
        ]


class StateMatchesConfig(EvaluatorConfig):
    # Oloproof's default: the whole state (or each path) as expected, nothing more.
    mode: Mode = "exact"
    # The field of the case's `expected` that holds the state, as in Oloproof.
    expected_field: DottedPath = Field(default="state", min_length=1)
    # None compares the whole state.
    paths: list[DottedPath] | None = Field(default=None, min_length=1)
    tolerance: float | None = Field(default=None, ge=0)
    # Left out of the comparison on both sides, e.g. free text: `notes.*.text`.
    ignore: list[GlobPath] = Field(default_factory=list)
    # Row tables compared by a key field, e.g. {waivers: condition_id}, independent of order.
    match_rows_by: dict[GlobPath, str] = Field(default_factory=dict)
    # Ours (Oloproof has no equivalent): a path the expected state does not hold must be
    # absent after the case too, rather than excluding the case; and it may name nothing.
    absent_ok: bool = False


class StateMatches(Evaluator):
    type: ClassVar[str] = "state_matches"
    config_model: ClassVar[type[EvaluatorConfig]] = StateMatchesConfig
    reads_state: ClassVar[bool] = True
    expects_state: ClassVar[bool] = True
    config: StateMatchesConfig

    def view(self, state: Any) -> Any:
        return state_view(state, ignore=self.config.ignore, rows=self.config.match_rows_by)

    def case_findings(self) -> CaseFindings:
        if self.config.absent_ok or not self.config.paths:
            return CaseFindings()
        return PathsNamingNothing(self, self._worlds, lambda case: list(self.config.paths or []))

    def _worlds(self, cases: list[CaseRecord]) -> Iterator[tuple[CaseRecord, list[Any]]]:
        for case in cases:
            if self.applies_to(case) and (expected := expected_state_of(case, self.config.expected_field)) is not ABSENT:
                yield case, [self.view(case.initial_state or {}), self.view(expected)]

    def judge(self, case: CaseRecord, recording: RecordedRun, context: JudgingContext) -> Verdict:
        expected_state = self.view(expected_state_of(case, self.config.expected_field))
        if expected_state is ABSENT:
            return self.verdict(case, EXCLUDED, "no_expected_state")
        if recording.environment_state is None:
            return self.verdict(case, MISSING, "no_recorded_state")
        state_after = self.view(recording.state_after)
        paths = self.config.paths or [""]
        unstated = [path for path in paths if read_path(expected_state, path) is ABSENT]
        if unstated and not self.config.absent_ok:
            # The case says nothing about these paths: judging only the rest would pass it on less.
            return self.verdict(case, EXCLUDED, "path_not_expected", {"paths": unstated})
        if all(read_path(expected_state, path) == {} for path in paths):
            # An expected `{}` states nothing: it would pass whatever the system did, even deleting everything.
            return self.verdict(case, EXCLUDED, "nothing_to_compare", {"paths": paths})
        row_tables = tuple(tuple(split_glob_path(table)) for table in self.config.match_rows_by)
        comparison = StateComparison(self.config.mode, self.config.tolerance, row_tables)
        rows = [
            row
            for path in paths
            for row in comparison.rows(path, read_path(expected_state, path), read_path(state_after, path))
        ]
        first = first_difference(rows)
        if first is None:
            return self.verdict(case, PASS, "state_matches", rows)
        return self.verdict(case, FAIL, f"state_differs: {first}", rows)
