"""Fixtures shared by the test areas."""
from __future__ import annotations

import pytest

from faults import net


@pytest.fixture
def namespaces_available() -> None:
    """Real network namespaces for a fault run, or the test skipped with the reason they cannot be made."""
    try:
        net.check_capability()
    except net.NetworkUnavailable as e:
        pytest.skip(str(e))
