"""The project's two YAML files, `oloproof.yaml` and `release.yaml`, as pydantic models.

The models mirror the files and carry their validation; reading a file turns every problem
into a line naming the file, the line where known, and the field.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ProjectError, describe_validation_error
from .paths import check_dotted_path
from .slicing import parse_slice_spec

PROJECT_FILE = "oloproof.yaml"
RELEASE_FILE = "release.yaml"
# What to tell a user who has no release policy on purpose, and the gate's reason then.
UNGATED_RUN = "`oloproof run --ungated` records and judges without a gate"
NO_RELEASE_POLICY = f"no release policy ({RELEASE_FILE}): nothing is gated"
# Partition keys become file names and UI selections: commas and `|` break Dagster's UI.
VERSION_PATTERN = re.compile(r"^[A-Za-z0-9._-]+$")
# A version names files (`tables/<table>/<version>.parquet`): room left for the suffix.
VERSION_MAX_LENGTH = 200


def version_problem(version: str) -> str | None:
    """Why `version` cannot be a partition key and a file name under .oloproof/ (None: it can).
    The one check of a version, wherever one comes from (oloproof.yaml, the system, the CLI)."""
    if not VERSION_PATTERN.match(version) or version in {".", ".."}:
        return f"{version!r} is not a valid version: use letters, digits, '.', '_' and '-' (not '.' or '..' alone)"
    if len(version) > VERSION_MAX_LENGTH:
        return f"{version[:20]!r}... is not a valid version: longer than {VERSION_MAX_LENGTH} characters"
    return None
EvaluatorT = TypeVar("EvaluatorT")


class StrictModel(BaseModel):
    # `.inf` and `.nan` are valid YAML floats; no setting of ours means anything with them.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def require_unique(names: list[str], what: str) -> None:
    """A validator's check that no name repeats (pydantic reports the ValueError by field)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{what} {name!r} repeats")
        seen.add(name)


# -- oloproof.yaml -------------------------------------------------------------------------


# -- system.kind: chat_agent (a model-driven agent over the tool box; run/chat_agent.py) -----

MODULE_ATTRIBUTE = r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$"
# An environment variable's name, as a POSIX shell spells one.
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
CHAT_AGENT = "chat_agent"
CHAT_AGENT_KEYS = ("model", "prompt", "tools", "max_turns", "answer")


class ChatModelConfig(StrictModel):
    """An OpenAI-compatible chat-completions endpoint, and how hard to try it."""

    base_url: str = Field(pattern=r"^https?://")
    name: str
    # The environment variable holding the API key (sent as a bearer token); none for a local server.
    api_key_env: str | None = None
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    request_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    # A request refused (connection refused, 429, 5xx, a timeout) is tried again this many times.
    retries: int = Field(default=3, ge=0, le=10)
    backoff_s: float = Field(default=1.0, ge=0, le=60)


class ChatAnswerConfig(StrictModel):
    """How the final message becomes the case's output: `text` puts its text under `field`;
    `json` asks the model for a JSON object (JSON mode) and takes that object as the output."""

    format: Literal["text", "json"] = "text"
    field: str = "answer"


# -- system.simulated_user (a model playing each case's persona; run/simulated_user.py) ------

# Oloproof's own: how many messages a simulated user sends when neither case nor project says.
DEFAULT_USER_TURNS = 8
OPENAI_BASE_URL = "https://api.openai.com/v1"


class SimulatedUserConfig(StrictModel):
    """Oloproof's `system.simulated_user`: the model that plays each case's persona, declared
    like a judge. Its settings are part of each recording's cache key, not of the system's
    version. `retries` and `backoff_s` are ours (as `system.model` has them)."""

    provider: Literal["anthropic", "openai", "openai_compatible"]
    model: str = Field(min_length=1)
    base_url: str | None = Field(default=None, pattern=r"^https?://")
    api_key_env: str | None = None
    temperature: float = Field(default=0.7, ge=0, le=2)
    max_tokens: int = Field(default=300, ge=1)
    timeout_s: float = Field(default=60.0, gt=0)
    max_turns: int = Field(default=DEFAULT_USER_TURNS, ge=1, le=100)
    persona_field: str = Field(default="persona", min_length=1)
    instructions: str | None = None
    retries: int = Field(default=3, ge=0, le=10)
    backoff_s: float = Field(default=1.0, ge=0, le=60)

    @model_validator(mode="after")
    def _a_client_for_the_provider(self) -> "SimulatedUserConfig":
        if self.provider == "anthropic":
            raise ValueError("provider 'anthropic' is not supported yet: use 'openai_compatible' (or 'openai')")
        if self.provider == "openai_compatible" and self.base_url is None:
            raise ValueError("provider 'openai_compatible' needs a 'base_url'")
        return self

    @property
    def endpoint(self) -> str:
        return self.base_url or OPENAI_BASE_URL

    def as_chat_model(self) -> "ChatModelConfig":
        """The endpoint as the chat-completions client takes it (endpoints/chat.py)."""
        return ChatModelConfig(
            base_url=self.endpoint, name=self.model, api_key_env=self.api_key_env, temperature=self.temperature,
            request_timeout_s=min(self.timeout_s, 3600), retries=self.retries, backoff_s=self.backoff_s,
        )


UserText = Annotated[str, Field(min_length=1)]


class Persona(StrictModel):
    """Oloproof's persona, read from each case's input (`persona_field`): who the simulated
    user is and what they want. `facts` are shared only when the conversation needs them;
    `opening`, when given, is the first message word for word; `max_turns` overrides the
    project's for this case. The system never sees it."""

    description: UserText
    goal: UserText
    facts: dict[str, Any] = Field(default_factory=dict)
    opening: UserText | None = None
    max_turns: int | None = Field(default=None, ge=1, le=100)


class SystemConfig(StrictModel):
    name: str
    version: str | None = None
    # For `kind: chat_agent`, the tools' module:attr (the system's code lives there).
    callable: str = Field(pattern=MODULE_ATTRIBUTE)
    # The record tables of the system's state (e.g. `orders`), named when a reset check fails.
    records: list[str] | None = None
    # Files and folders (relative to the project) that are the system's code besides the
    # callable's own module: an edit to any of them re-records, as one to that module does.
    code_paths: list[str] = Field(default_factory=list)
    # Environment variables the system reads: each one's value (hashed) is part of its
    # fingerprint, so changing one re-records; a variable not named here is not seen.
    env: list[Annotated[str, Field(pattern=ENV_NAME)]] = Field(default_factory=list)
    # `chat_agent`: a chat-completions model calling `tools` (a class: tool schemas, their
    # implementations over the state, reset and snapshot), prompted by the `prompt` file.
    kind: Literal["callable", "chat_agent"] = "callable"
    model: ChatModelConfig | None = None
    prompt: str | None = None
    tools: str | None = Field(default=None, pattern=MODULE_ATTRIBUTE)
    max_turns: int = Field(default=12, ge=1, le=200)
    answer: ChatAnswerConfig = Field(default_factory=ChatAnswerConfig)
    # Oloproof's: a model plays each case's persona (a chat agent's conversation is run by the
    # pipeline; a Python system asks for the user's messages itself).
    simulated_user: SimulatedUserConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _chat_agent_keys(cls, data: Any) -> Any:
        """A chat agent names its `tools`, which are its code (its `callable`); other kinds take
        none of its keys."""
        if not isinstance(data, dict):
            return data
        if data.get("kind") == CHAT_AGENT:
            if data.get("callable", data.get("tools")) != data.get("tools"):
                raise ValueError("a chat_agent names its 'tools', not a 'callable'")
            missing = [key for key in ("model", "prompt", "tools") if data.get(key) is None]
            if missing:
                raise ValueError(f"a chat_agent needs {', '.join(repr(key) for key in missing)}")
            return {**data, "callable": data["tools"]}
        given = [key for key in CHAT_AGENT_KEYS if key in data]
        if given:
            raise ValueError(f"{', '.join(repr(key) for key in given)} only go with 'kind: chat_agent'")
        return data

    @property
    def is_chat_agent(self) -> bool:
        return self.kind == CHAT_AGENT

    @field_validator("env")
    @classmethod
    def _env_names_unique(cls, names: list[str]) -> list[str]:
        require_unique(names, "environment variable")
        return names

    @field_validator("version")
    @classmethod
    def _version_is_a_partition_key(cls, version: str | None) -> str | None:
        problem = None if version is None else version_problem(version)
        if problem is not None:
            raise ValueError(problem)
        return version


class TransformConfig(StrictModel):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    field: str
    template: str | None = None
    replace: list[tuple[str, str]] | None = None
    validity_labels: str | None = None
    # Below 1, as in Oloproof: a lower confidence bound from finitely many labels never reaches 1.
    minimum_validity: float = Field(default=0.8, ge=0.0, lt=1.0)
    # Part of the transform's digest: bump it to retire every label written for the old one.
    version: int = Field(default=1, ge=1)

    @field_validator("field")
    @classmethod
    def _field_is_a_path(cls, path: str) -> str:
        return check_dotted_path(path)

    @model_validator(mode="after")
    def _template_or_replace(self) -> "TransformConfig":
        if (self.template is None) == (self.replace is None):
            raise ValueError(f"transform {self.name!r} needs exactly one of 'template' or 'replace'")
        if self.template is not None and "{value}" not in self.template:
            raise ValueError(f"transform {self.name!r}: template has no '{{value}}' to substitute")
        if self.replace is not None and not self.replace:
            raise ValueError(f"transform {self.name!r}: 'replace' needs at least one [old, new] pair")
        if self.replace is not None and any(old == "" for old, _ in self.replace):
            # str.replace with "" inserts the new text between every two characters.
            raise ValueError(f"transform {self.name!r}: 'replace' has an empty old text")
        return self


class MetamorphicConfig(StrictModel):
    transforms: list[TransformConfig] = Field(default_factory=list)

    @field_validator("transforms")
    @classmethod
    def _names_unique(cls, transforms: list[TransformConfig]) -> list[TransformConfig]:
        require_unique([transform.name for transform in transforms], "transform name")
        return transforms


# A week: longer waits are a typo, and the thread and Dask timeouts overflow long before `.inf`.
MAX_TIMEOUT_S = 7 * 24 * 3600
# More trials than this is a typo: each one records every case again.
MAX_TRIALS = 100


class ExecutionConfig(StrictModel):
    timeout_s: float = Field(default=120.0, gt=0, le=MAX_TIMEOUT_S)
    # Sandboxes run in parallel on Dask when workers > 1; one case at a time within each.
    workers: int = Field(default=1, ge=1)
    scheduler_address: str | None = None
    # Each case recorded this many times, for systems that are not deterministic (pass^k).
    trials: int = Field(default=1, ge=1, le=MAX_TRIALS)


# More cases in flight than this is a typo: each holds a system instance and a thread.
MAX_CONCURRENCY = 1024


class ConcurrencyConfig(StrictModel):
    """Oloproof's `concurrency`: how many cases run at once (`system`), and how many judge
    calls per endpoint (`judge`). Here `system` is, for `kind: chat_agent`, cases in threads
    of one worker process (run/worker.py); for a Python system, the most local sandboxes
    (worker processes) its cases run on at once without Dask (run/local_sandboxes.py).
    `judge`: a rubric judge's questions in flight at once (evaluators/judging.py)."""

    system: int = Field(default=8, ge=1, le=MAX_CONCURRENCY)
    judge: int = Field(default=4, ge=1, le=MAX_CONCURRENCY)


class BudgetConfig(StrictModel):
    """Oloproof's `budget`: the most one run may spend, in model calls, tokens (prompt plus
    completion) or dollars (priced by `pricing`); at least one is set. A reused recording
    costs nothing. The run starts no new case once one is reached (so it may end above it by
    the cases in flight); the cases it did not run are recorded as not run (run/budget.py)."""

    model_calls: int | None = Field(default=None, gt=0)
    tokens: int | None = Field(default=None, gt=0)
    usd: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _something_is_bounded(self) -> "BudgetConfig":
        if self.model_calls is None and self.tokens is None and self.usd is None:
            raise ValueError("a budget sets at least one of model_calls, tokens or usd")
        return self


class ModelRateConfig(StrictModel):
    """Oloproof's `pricing` entry: what one model (its name as `system.model.name` gives it,
    matched exactly) costs this project, in dollars per million tokens."""

    model: str = Field(min_length=1)
    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)

    def usd(self, *, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


class ScheduleConfig(StrictModel):
    cron: str = "0 2 * * *"
    timezone: str = "UTC"


def _check_slice_spec(text: str) -> str:
    parse_slice_spec(text)
    return text


# -- Oloproof's keys -------------------------------------------------------------------------


class ExportKeyBlock(StrictModel):
    """Oloproof writes this into oloproof.yaml on its first run: the fingerprint of the key its
    exports are keyed with. Kept as read; this pipeline exports nothing keyed."""

    fingerprint: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    keyed: list[str] = Field(default_factory=list)
    previous: list[str] = Field(default_factory=list)


# Dagster names (groups, asset key parts, jobs) take only these characters.
DAGSTER_NAME = re.compile(r"^[A-Za-z0-9_]+$")
# What Dagster accepts as an asset's owner and tag (dagster/_utils/tags.py, _core/utils.py),
# checked here so a bad one is a line naming oloproof.yaml, not a failed code location.
DAGSTER_OWNER = re.compile(r"^(team:.+|[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,7})$")
DAGSTER_TAG_KEY = re.compile(r"^([A-Za-z0-9_.-]{1,63}/)?[A-Za-z0-9_.-]{1,63}$")
DAGSTER_TAG_VALUE = re.compile(r"^[A-Za-z0-9_.-]{0,63}$")


class DagsterConfig(StrictModel):
    """How the project's assets read in Dagster's catalog: who owns them and how they are
    tagged (the catalog filters by both). Optional; nothing here changes a result."""

    # An email address or `team:<name>`, as Dagster takes an owner.
    owners: list[str] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)

    @field_validator("owners")
    @classmethod
    def _owners_dagster_takes(cls, owners: list[str]) -> list[str]:
        for owner in owners:
            if not DAGSTER_OWNER.match(owner):
                raise ValueError(f"owner {owner!r} is neither an email address nor 'team:<name>'")
        require_unique(owners, "owner")
        return owners

    @field_validator("tags")
    @classmethod
    def _tags_dagster_takes(cls, tags: dict[str, str]) -> dict[str, str]:
        for key, value in tags.items():
            if not DAGSTER_TAG_KEY.match(key) or key.startswith("dagster/"):
                raise ValueError(
                    f"tag key {key!r}: use letters, digits, '_', '-', '.' (at most 63), optionally after "
                    "one 'namespace/' that is not 'dagster/'"
                )
            if not DAGSTER_TAG_VALUE.match(value):
                raise ValueError(f"tag {key!r}: value {value!r}: use letters, digits, '_', '-', '.' (at most 63)")
        return tags


def dagster_name(project: str) -> str:
    """A valid Dagster name for a project name: itself when valid, else its other characters
    replaced by `_` plus a short digest of the name, so two projects never share one."""
    if DAGSTER_NAME.match(project):
        return project
    suffix = hashlib.sha256(project.encode("utf-8")).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9_]', '_', project)}_{suffix}"


class ProjectConfig(StrictModel):
    version: int = 1
    project: str
    dataset: str | list[str]
    system: SystemConfig
    metamorphic: MetamorphicConfig = Field(default_factory=MetamorphicConfig)
    # Validated against the evaluator registry by `load_project`, one model per `type`.
    evaluators: list[dict[str, Any]] = Field(default_factory=list)
    slices: list[Annotated[str, AfterValidator(_check_slice_spec)]] = Field(default_factory=list)
    min_slice_support: int = Field(default=10, ge=1)
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)
    concurrency: ConcurrencyConfig = Field(default_factory=ConcurrencyConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    budget: BudgetConfig | None = None
    pricing: list[ModelRateConfig] = Field(default_factory=list)
    # A correct agent, `module:func(input, toolbox)` returning the output: `oloproof certify`
    # plays it on each case without `expected.actions` (run/reference.py).
    reference: str | None = Field(default=None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
    # Oloproof's own record of its export key; see ExportKeyBlock.
    export_key: ExportKeyBlock | None = None
    # Owners and tags of the project's assets in Dagster.
    dagster: DagsterConfig = Field(default_factory=DagsterConfig)

    @field_validator("project")
    @classmethod
    def _project_name_usable(cls, name: str) -> str:
        # Any readable name (Oloproof's own are like `stateful-agent-example`): Dagster gets
        # `dagster_name(name)`, people see the name as written.
        if not name.strip() or any(not character.isprintable() for character in name):
            raise ValueError("the project needs a name of printable characters")
        return name


# -- release.yaml --------------------------------------------------------------------------


class RuleConfig(StrictModel):
    id: str
    metric: str
    min: float | None = Field(default=None, ge=0.0, le=1.0)
    max: float | None = Field(default=None, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _has_a_bar(self) -> "RuleConfig":
        if self.min is None and self.max is None:
            raise ValueError(f"rule {self.id!r} needs 'min' or 'max'")
        if self.min is not None and self.max is not None and self.min >= self.max:
            # An interval can clear both bars only when it lies strictly between them.
            raise ValueError(f"rule {self.id!r}: min {self.min:g} is not below max {self.max:g}, so it can never pass")
        if self.min is not None and self.max is not None:
            # As in Oloproof: one bar per rule, so each decision says which bar it was.
            raise ValueError(f"rule {self.id!r} takes 'min' or 'max', not both; write two rules")
        return self


class ReleasePolicy(StrictModel):
    version: int = 1
    confidence_level: float = Field(default=0.95, gt=0.5, lt=1.0)
    allow_approximate_methods: bool = False
    # Oloproof refuses fewer than 10: a cluster bootstrap over so few clusters is no interval.
    min_clusters: int = Field(default=20, ge=10)
    # Cases `oloproof certify` flags (broken, or passed by doing nothing) count as EXCLUDED.
    require_certified_cases: bool = False
    # Validated when absent too: a policy that names no rule is refused, not an empty gate.
    rules: list[RuleConfig] = Field(default_factory=list, validate_default=True)

    @classmethod
    def ungated(cls) -> "ReleasePolicy":
        """What a project without release.yaml has: the defaults, and nothing gated."""
        return cls.model_construct()

    @field_validator("rules")
    @classmethod
    def _rules_gate_something(cls, rules: list[RuleConfig]) -> list[RuleConfig]:
        if not rules:
            # A gate over no rules would ALLOW anything.
            raise ValueError(f"a release policy needs at least one rule (without {RELEASE_FILE}, {UNGATED_RUN})")
        require_unique([rule.id for rule in rules], "rule id")
        return rules


# -- the project ---------------------------------------------------------------------------


@dataclass
class Project:
    root: Path
    config: ProjectConfig
    # With no release.yaml, an empty policy: nothing is gated, which only an ungated run accepts.
    release: ReleasePolicy
    # Evaluator instances, built by the registry (`oloproof_pipeline.project.load_project`).
    evaluators: list[Any] = field(default_factory=list)
    # `oloproof run --set KEY=VALUE` overrides applied to oloproof.yaml (model/overrides.py).
    settings: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The project's name as written, for people."""
        return self.config.project

    @property
    def dagster_name(self) -> str:
        """The name Dagster knows the project by (its group, asset keys, jobs)."""
        return dagster_name(self.config.project)

    @property
    def release_path(self) -> Path:
        return self.root / RELEASE_FILE

    @property
    def is_gated(self) -> bool:
        """Whether a release policy decides this project's gate (release.yaml exists)."""
        return bool(self.release.rules)

    def criteria(self) -> list[str]:
        return [evaluator.criterion for evaluator in self.evaluators]

    def evaluators_of(self, kind: type[EvaluatorT]) -> list[tuple[int, EvaluatorT]]:
        """(index in `evaluators:`, evaluator) for each evaluator of one kind."""
        return [(index, evaluator) for index, evaluator in enumerate(self.evaluators) if isinstance(evaluator, kind)]


class UniqueKeyLoader(yaml.SafeLoader):
    """`yaml.safe_load`'s loader, except that a key written twice in one mapping is an error:
    PyYAML keeps the last one, which silently drops half a policy. Merge keys (`<<`) may still
    be overridden, as YAML intends."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            first_lines: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = first_lines.get(key)
                except TypeError:  # an unhashable key: the base constructor says so
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} repeats the one on line {first}", key_node.start_mark
                    )
                first_lines[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def check_release_policy(project: Project, *, ungated: bool) -> None:
    """A run decides a gate only under a release policy; without one it must be asked for
    explicitly (`--ungated`), so a missing or misnamed release.yaml never reads as ALLOW."""
    if not ungated and not project.is_gated:
        raise ProjectError(f"{project.release_path}: file not found, so nothing would be gated; write it ({UNGATED_RUN})")
    if ungated and project.is_gated:
        raise ProjectError(
            f"{project.release_path}: --ungated asks for no gate, but this release policy has "
            f"{len(project.release.rules)} rules; drop --ungated to decide them"
        )


def read_text_file(path: Path) -> str:
    """A project file's text; bytes that are not UTF-8 are a one-line error naming the line."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise not_utf8(path, data[: error.start].count(b"\n") + 1, data[error.start]) from None


def not_utf8(path: Path, line: int, byte: int) -> ProjectError:
    return ProjectError(f"{path}:{line}: not UTF-8 text (byte 0x{byte:02x}); save the file as UTF-8")


def read_yaml(path: Path) -> tuple[Any, yaml.Node | None]:
    """The file's data and its node tree (for line numbers in errors)."""
    if not path.is_file():
        raise ProjectError(f"{path}: file not found")
    loader = UniqueKeyLoader(read_text_file(path))
    try:
        root_node = loader.get_single_node()
        return (None if root_node is None else loader.construct_document(root_node)), root_node
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ProjectError(f"{path}{line}: invalid YAML: {problem}") from None
    except RecursionError:
        raise ProjectError(f"{path}: invalid YAML: nested too deeply") from None
    finally:
        loader.dispose()


def validate_yaml(model: type[BaseModel], path: Path, data: Any, root_node: yaml.Node | None) -> BaseModel:
    """`read_yaml`'s data as `model`; errors name the file, line and field."""
    if not isinstance(data, dict):
        raise ProjectError(f"{path}:1: expected a mapping of keys at the top level")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ProjectError(describe_validation_error(error, path, yaml_root=root_node)) from None
