"""`oloproof import`: another benchmark's suite written out as an evaluation project."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .options import PLAIN_HELP, CommandFailed
from .render import say
from ..model.outcomes import EXIT_USAGE

import_app = typer.Typer(no_args_is_help=True, help="Write another benchmark's suite out as an evaluation project.", **PLAIN_HELP)


@import_app.command("agentdojo")
def import_agentdojo_suite(
    suite: str = typer.Argument(..., help="The AgentDojo suite: banking, slack, travel or workspace."),
    directory: Path = typer.Argument(..., help="The project folder to create (new or empty)."),
    benchmark: str = typer.Option("v1", "--benchmark", help="AgentDojo's benchmark version, e.g. v1 or v1.2."),
    injection_task: Optional[str] = typer.Option(
        None, "--injection-task", help="The injection task whose goal the injection vectors carry (default: the suite's first)."
    ),
    injections: bool = typer.Option(True, "--injections/--no-injections", help="Make a world transform per injection vector."),
    model: Optional[str] = typer.Option(None, "--model", help="The model under test (system.model.name)."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="Its OpenAI-compatible endpoint (system.model.base_url)."),
    api_key_env: Optional[str] = typer.Option(
        None, "--api-key-env", help="The environment variable holding its API key (system.model.api_key_env)."
    ),
) -> None:
    """An AgentDojo suite (the `agentdojo` extra) as a project: one case per user task."""
    try:
        from ..importers.agentdojo import import_agentdojo  # needs the `agentdojo` extra
    except ImportError as error:
        raise CommandFailed(f"oloproof import agentdojo needs the agentdojo extra (pip install 'oloproof-pipeline[agentdojo]'): {error}",
                            EXIT_USAGE) from None
    chosen = {key: value for key, value in {"name": model, "base_url": base_url, "api_key_env": api_key_env}.items() if value is not None}
    imported = import_agentdojo(suite, directory, benchmark_version=benchmark, injection_task=injection_task,
                                injections=injections, model=chosen)
    say(f"Wrote {imported.root}: {imported.cases} cases from AgentDojo's {imported.suite} suite.")
    if imported.transforms:
        say(f"  world transforms (injection vectors): {', '.join(imported.transforms)}")
    if imported.unplaced_vectors:
        say(f"  injection vectors no single text of the environment holds (not placed): {', '.join(imported.unplaced_vectors)}")
    say(f"  check the references: oloproof certify --project {imported.root}")
