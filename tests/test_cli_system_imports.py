"""How often the CLI imports the system under test, counted by a system that appends a line to a
log file outside the project each time its module is imported (in any process: the CLI, the
launch, a stage, a worker). Reading stored results never imports it; a rerun with nothing
changed imports it only to learn a version oloproof.yaml does not declare."""

from __future__ import annotations

import json
from pathlib import Path
from helpers import oloproof


# A cold run of the example (a declared version, one sandbox): the recording worker and the
# replay worker import it; the CLI, the launch and the stages never do (the run carries the
# resolved system as a tag, and a worker checks the version it reports).
COLD_RUN_IMPORTS_AT_MOST = 2


def logging_imports(project: Path, log: Path) -> None:
    """The example's system, reporting the version oloproof.yaml declares, logging each import."""
    app = project / "app.py"
    app.write_text(
        app.read_text(encoding="utf-8")
        + "\nRefundDesk.version = '1.0.0'\n"
        + f"with open({str(log)!r}, 'a', encoding='utf-8') as _log:\n    _log.write('imported\\n')\n",
        encoding="utf-8",
    )


def imports(log: Path) -> int:
    return len(log.read_text(encoding="utf-8").splitlines()) if log.is_file() else 0


def test_reading_commands_never_import_the_system_and_a_run_resolves_it_once(refund_desk, tmp_path):
    log = tmp_path / "imports.log"  # beside the project, not in it: no input of the run
    logging_imports(refund_desk, log)

    cold = oloproof("run", cwd=refund_desk)
    assert cold.returncode == 1, cold.stdout + cold.stderr  # BLOCK, as the example is
    assert 1 <= imports(log) <= COLD_RUN_IMPORTS_AT_MOST

    # A declared version is never probed: an unchanged rerun and every reading command
    # answer from the stored tables without importing the system.
    before = imports(log)
    rerun = oloproof("run", cwd=refund_desk)
    assert rerun.returncode == 1 and "Version 1.0.0 is up to date" in rerun.stdout, rerun.stdout + rerun.stderr
    for command in (["gate"], ["gate", "--json"], ["inspect", "ord-013"], ["export", "-o", "-"], ["report"],
                    ["export", "--format", "markdown", "-o", "-"], ["compare", "1.0.0", "1.0.0"]):
        finished = oloproof(*command, cwd=refund_desk)
        assert finished.returncode in (0, 1), (command, finished.stderr)
    assert imports(log) == before

    # With no version declared, the system says it: once per launch of the CLI, however the
    # rerun ends, and reading commands take the last version stored instead of asking.
    config = refund_desk / "oloproof.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace('  version: "1.0.0"\n', ""), encoding="utf-8")
    relaunched = oloproof("run", cwd=refund_desk)
    assert relaunched.returncode == 1, relaunched.stdout + relaunched.stderr
    before = imports(log)
    rerun = oloproof("run", cwd=refund_desk)
    assert rerun.returncode == 1 and "Version 1.0.0 is up to date" in rerun.stdout, rerun.stdout + rerun.stderr
    assert imports(log) == before + 1
    gate = oloproof("gate", "--json", cwd=refund_desk)
    assert gate.returncode == 1 and json.loads(gate.stdout)["version"] == "1.0.0", gate.stderr
    for command in (["inspect", "ord-013"], ["export", "-o", "-"]):
        finished = oloproof(*command, cwd=refund_desk)
        assert finished.returncode == 0 and "1.0.0" in finished.stdout, (command, finished.stderr)
    assert imports(log) == before + 1


def test_reading_back_with_no_version_declared_and_nothing_stored_is_one_line(refund_desk):
    config = refund_desk / "oloproof.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace('  version: "1.0.0"\n', ""), encoding="utf-8")
    for command, table in ((["gate"], "gate"), (["inspect", "ord-013"], "verdicts"), (["export"], "verdicts")):
        finished = oloproof(*command, cwd=refund_desk)
        assert finished.returncode == 5 and finished.stdout == ""
        assert finished.stderr.splitlines() == [f"error: no {table} stored for any version; run `oloproof run` first"]
