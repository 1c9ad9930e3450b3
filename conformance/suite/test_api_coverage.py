"""API coverage (PRO-1): every API version the broker advertises in ApiVersions is answered.

A client picks the highest version both sides list (KIP-35), so an advertised version that
does not work breaks whichever client picks it. One minimal valid request per advertised
version (conformance/api_coverage.py) must be answered at that version, with its correlation
id, without closing the connection; error codes are fine. The run's report shows the table,
advertised against answered, per API.
"""
from __future__ import annotations

import json

import pytest

from conformance.api_coverage import probe_api
from conformance.ops import expect
from conformance.plugin import API_COVERAGE_PROPERTY

COLUMN = "wire"
FAILURES_SHOWN_MAX = 3


@pytest.mark.guarantee("PRO-1")
def test_every_advertised_api_version_is_answered(wire, target, record_property):
    caps = target.refresh_capabilities()
    coverage = [probe_api(wire, api_key, advertised) for api_key, advertised in sorted(caps.api_versions.items())]
    record_property(API_COVERAGE_PROPERTY, json.dumps([c.to_json() for c in coverage]))
    failed = [(c.name, version, finding) for c in coverage for version, finding in c.failed.items()]
    expect(not failed, "every advertised API version answered at that version (KIP-35)",
           f"{len(failed)} advertised version(s) not answered "
           f"({', '.join(f'{name} v{version}' for name, version, _ in failed)}); first: "
           + " | ".join(finding for _, _, finding in failed[:FAILURES_SHOWN_MAX]))
