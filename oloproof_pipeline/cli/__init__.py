"""The `oloproof` command: the same Dagster assets, headless, against the project's instance.

One module per command family (`init`, `run`, `gate`, `inspect`, `results`: report, export
and compare, `labels`, `certify`, `importing`); `render` and `options` are what they share. Commands are
registered here, in the order `--help` lists them."""

from __future__ import annotations

import atexit
import gc
import sys

from ..model.collector import imported_aside

with imported_aside():  # every command's modules, with the collector held off
    import logging
    import traceback

    import typer
    from typer.exceptions import TyperException

    from ..model.errors import ProjectError
    from ..model.outcomes import EXIT_ALLOW, EXIT_INCOMPLETE, EXIT_USAGE
    from ..store.journal import log as evidence_log
    from ..store.layout import StorageWriteError, StoredTableError
    from .certify import certify
    from .gate import gate
    from .init import init
    from .inspect import inspect
    from .importing import import_app
    from .labels import labels_app
    from .options import CommandFailed, app
    from .render import configure_consoles, console, error_console, error_line, fail
    from .results import compare, export, report
    from .run import run

__all__ = ["app", "main"]

for command in (init, run, gate, inspect, report, export, compare, certify):
    app.command()(command)
app.add_typer(labels_app, name="labels")
app.add_typer(import_app, name="import")


class WarningLines(logging.Handler):
    """Warnings about stored evidence (a skipped journal line, a table rebuilt from its
    journal) as one `warning:` line each, each said once however often it is found."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message not in self.said:
            self.said.add(message)
            error_line(f"[yellow]warning:[/yellow] {message}")


def usage_error_line(error: TyperException) -> str:
    """click's usage error as one line: the problem and where to read the usage."""
    context = getattr(error, "ctx", None)
    command = context.command_path if context is not None else "oloproof"
    return f"{error.format_message()} (see `{command} --help`)"


def exit_without_collecting() -> None:
    """Set every object alive at exit aside from the garbage collector. The interpreter's
    shutdown runs full collections as it clears the modules, each walking every object a run
    leaves (Dagster's and pandas' modules alone are over a million): about 0.7 s of a small
    run's CPU, spent on memory the process is about to hand back whole. What the handlers after
    this one make is still collected; files and databases are closed where they are used."""
    gc.freeze()


def main() -> None:
    """Entry point: known failures print one readable line and a distinct exit code."""
    # Registered once per process (tests call `main` many times), and run after the handlers
    # a command registers later (atexit runs the last registered first).
    atexit.unregister(exit_without_collecting)
    atexit.register(exit_without_collecting)
    configure_consoles()  # sized to the streams and $COLUMNS as they are now
    evidence_log.addHandler(WarningLines())
    evidence_log.propagate = False
    try:
        # Outside standalone mode click returns a typer.Exit's code instead of exiting.
        result = app(standalone_mode=False)
        sys.exit(result if isinstance(result, int) else EXIT_ALLOW)
    except ProjectError as error:
        for problem in error.problems:
            error_line(f"[red]error:[/red] {problem}")
        sys.exit(EXIT_USAGE)
    except CommandFailed as error:
        fail(str(error), error.exit_code)
    except (StoredTableError, StorageWriteError) as error:
        fail(str(error), EXIT_INCOMPLETE)
    except OSError as error:  # a full disk, a read-only folder, a path that is not a folder
        where = f"{error.filename}: " if error.filename else ""
        fail(f"{where}{error.strerror or error}", EXIT_INCOMPLETE)
    except (typer.Abort, KeyboardInterrupt):
        error_console.print("aborted")
        sys.exit(130)
    except TyperException as error:  # click's own errors; typer bundles its click as typer._click
        if type(error).__name__ == "NoArgsIsHelpError":
            console.print(error.format_message(), highlight=False)  # the help text itself
            sys.exit(EXIT_USAGE)
        fail(usage_error_line(error), EXIT_USAGE if error.exit_code == EXIT_USAGE else EXIT_INCOMPLETE)
    except Exception as error:
        # A bug, not a verdict: show where, and never exit with a code that reads as a gate.
        traceback.print_exc()
        fail(f"internal error: {type(error).__name__}: {error}", EXIT_INCOMPLETE)
