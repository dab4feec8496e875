from pathlib import Path

from oloproof_pipeline.defs import build_definitions

defs = build_definitions(Path(__file__).parent)
