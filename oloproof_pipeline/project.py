"""Opening a project: its files read and validated (`model`), its evaluators built
(`evaluators`), and the checks that need both (each rule names a criterion, each
metamorphic relation a transform)."""

from __future__ import annotations

from pathlib import Path

import yaml

from .evaluators import build_evaluators
from .evaluators.metamorphic_relation import MetamorphicRelation
from .model.config import PROJECT_FILE, RELEASE_FILE, Project, ProjectConfig, ReleasePolicy, read_yaml, validate_yaml
from .model.errors import ProjectError, yaml_line
from .model.overrides import SET_OPTION, apply_settings, parse_settings
from .model.trials import PASS_ALL_TRIALS, PASS_AT_ONE, split_trial_metric


def load_project(root: Path | str, settings: tuple[str, ...] | list[str] = ()) -> Project:
    """Read and validate `oloproof.yaml`, `release.yaml` and the evaluators they name.
    `settings` are `--set KEY=VALUE` overrides of oloproof.yaml (model/overrides.py),
    validated with the file as if written in it."""
    root = Path(root).resolve()
    if not root.is_dir():
        raise ProjectError(f"{root}: no such project folder")
    # Each file is read once: its node tree gives the line numbers of later errors.
    config_path = root / PROJECT_FILE
    config_data, config_root = read_yaml(config_path)
    try:
        config_data = apply_settings(config_data, parse_settings(settings), file=str(config_path))
        config = validate_yaml(ProjectConfig, config_path, config_data, config_root)
        evaluators = build_evaluators(config.evaluators, file=config_path, yaml_root=config_root)
    except ProjectError as error:
        raise with_settings_named(error, settings) from None
    release_path = root / RELEASE_FILE
    release_data, release_root = read_yaml(release_path) if release_path.exists() else (None, None)
    release = validate_yaml(ReleasePolicy, release_path, release_data, release_root) if release_path.exists() else ReleasePolicy.ungated()
    for evaluator in evaluators:
        evaluator.bind(config)
    project = Project(root=root, config=config, release=release, evaluators=evaluators, settings=tuple(settings))
    _check_rules_name_criteria(project, release_path, release_root)
    _check_relations_name_transforms(project, config_root)
    return project


def with_settings_named(error: ProjectError, settings: tuple[str, ...] | list[str]) -> ProjectError:
    """A problem found with `--set` overrides says so: the line it names may not hold the value."""
    if not settings:
        return error
    given = ", ".join(f"{SET_OPTION} {text}" for text in settings)
    return ProjectError([f"{problem} (with {given})" for problem in error.problems])


def _check_rules_name_criteria(project: Project, release_path: Path, release_root: yaml.Node | None) -> None:
    criteria = project.criteria()
    seen: dict[str, int] = {}
    for index, criterion in enumerate(criteria):
        if criterion in seen:
            raise ProjectError(
                f"{project.root / PROJECT_FILE}: evaluators[{index}]: criterion {criterion!r} "
                f"repeats evaluators[{seen[criterion]}]; give one a distinct 'criterion'"
            )
        seen[criterion] = index
    if not project.release.rules:
        return
    problems = []
    for index, rule in enumerate(project.release.rules):
        _, criterion = split_trial_metric(rule.metric)
        if criterion not in seen:
            line = yaml_line(release_root, ("rules", index, "metric"))
            problems.append(
                f"{release_path}:{line}: rules[{index}].metric: {rule.metric!r} is not a criterion of any "
                f"evaluator (criteria: {', '.join(criteria) or 'none'}; over trials: {PASS_ALL_TRIALS}:<criterion> or {PASS_AT_ONE}:<criterion>)"
            )
    if problems:
        raise ProjectError(problems)


def _check_relations_name_transforms(project: Project, config_root: yaml.Node | None) -> None:
    """Every metamorphic relation must name a transform of `metamorphic.transforms`."""
    names = [transform.name for transform in project.config.metamorphic.transforms]
    config_path = project.root / PROJECT_FILE
    problems = []
    for index, relation in enumerate(project.evaluators):
        if isinstance(relation, MetamorphicRelation) and relation.config.transform not in (None, *names):
            line = yaml_line(config_root, ("evaluators", index, "transform"))
            problems.append(
                f"{config_path}:{line}: evaluators[{index}].transform: {relation.config.transform!r} is not a "
                f"transform of metamorphic.transforms (transforms: {', '.join(names) or 'none'})"
            )
    if problems:
        raise ProjectError(problems)
