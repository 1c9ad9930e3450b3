"""Two single-node `kspec broker` clusters for the mirror tests, shared by the module: each test
uses its own cluster aliases and topics, so the mirror's internal topics never overlap."""
from __future__ import annotations

import pytest

from reference.process import BrokerProcess


@pytest.fixture(scope="package")
def clusters(tmp_path_factory):
    base = tmp_path_factory.mktemp("mirror-clusters")
    source, target = BrokerProcess(str(base / "source")), BrokerProcess(str(base / "target"))
    source.start()
    try:
        target.start()
        try:
            yield source.bootstrap, target.bootstrap
        finally:
            target.stop()
    finally:
        source.stop()
