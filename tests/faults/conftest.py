"""Fixtures for the fault-harness tests: real namespaces (skipped with the reason when they
cannot be made), destroyed and checked gone even when a test fails."""
from __future__ import annotations

import pytest

from faults import net
from faults_helpers import network_name


@pytest.fixture
def network(namespaces_available, tmp_path):
    """Three namespaces on a bridge; destroyed, and checked gone, even when the test fails."""
    network = net.Network(network_name(), nodes=3, state_dir=tmp_path / "state")
    try:
        network.create()
        yield network
    finally:
        network.destroy()
        assert net.leftovers(network.name) == []
