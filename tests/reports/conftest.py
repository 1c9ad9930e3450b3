from __future__ import annotations

from pathlib import Path

import pytest
from reports_synthetic import SyntheticRun, write_run


@pytest.fixture
def synthetic_run(tmp_path: Path) -> SyntheticRun:
    """A checked synthetic run in REPORTS/runs/run-a, REPORTS being tmp_path/reports."""
    return write_run(tmp_path / "reports" / "runs" / "run-a")
