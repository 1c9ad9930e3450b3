"""The project's import structure: no import cycle between its modules, and the layering
declared in pyproject.toml ([tool.importlinter]) kept.

grimp (import-linter's graph) records every import statement of a module, those inside
functions and under TYPE_CHECKING included, so a cycle dodged by a function-local import
still counts here.
"""
from __future__ import annotations

import graphlib
import os
import subprocess
import sys

import grimp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROJECT_PACKAGES = ("reference", "spec", "conformance", "faults", "spark_validation", "reports", "kspec", "mirror",
                    "connect")


def test_no_import_cycle_between_modules():
    graph = grimp.build_graph(*PROJECT_PACKAGES, cache_dir=None)
    imports = {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    try:
        graphlib.TopologicalSorter(imports).prepare()
    except graphlib.CycleError as e:
        raise AssertionError(f"import cycle: {' -> '.join(e.args[1])}") from None


def test_import_linter_contracts_kept():
    lint_imports = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    result = subprocess.run([lint_imports, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
