"""The house as ARCHITECTURE.md draws it: every package and file it names exists, and the
import contracts hold."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_path_architecture_md_names_exists():
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(oloproof_pipeline/[\w/]+(?:\.py)?)`", text))
    named |= {f"oloproof_pipeline/{name}" for name in re.findall(r"^  (\w+/|\w+\.py)", text, re.M)}
    assert len(named) >= 15
    missing = sorted(path for path in named if not (REPO / path).exists())
    assert not missing, f"ARCHITECTURE.md names what is not there: {missing}"


def test_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint)], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:]
    declared = (REPO / "pyproject.toml").read_text(encoding="utf-8").count("[[tool.importlinter.contracts]]")
    assert declared >= 3 and f"{declared} kept, 0 broken" in result.stdout
