"""`kspec conformance` against a SASL_SSL broker, with the client properties on the command line:
the security area (AUTH-1, AUTH-2, AUTH-3) runs and passes instead of being skipped."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.security.conftest import PASSWORDS


def test_security_area_passes_against_a_sasl_ssl_broker(secure_broker, pki, tmp_path):
    result_path = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, "-m", "kspec.cli", "conformance", "--bootstrap-servers", secure_broker.listeners["SASL_SSL"],
         "--only", "AUTH-1,AUTH-2,AUTH-3", "--json", str(result_path),
         "--client-property", "security.protocol=SASL_SSL", "--client-property", "sasl.mechanism=PLAIN",
         "--client-property", "sasl.username=admin", "--client-property", f"sasl.password={PASSWORDS['admin']}",
         "--client-property", f"ssl.ca.location={pki.ca_path}"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    outcomes = {(test["test"], test["outcome"]) for test in json.loads(result_path.read_text())["tests"]}
    assert {outcome for _, outcome in outcomes} == {"passed"} and len(outcomes) == 3, outcomes


def test_security_area_is_skipped_with_its_reason_on_a_plaintext_listener(secure_broker, tmp_path):
    result_path = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, "-m", "kspec.cli", "conformance", "--bootstrap-servers", secure_broker.listeners["PLAINTEXT"],
         "--only", "AUTH-1,AUTH-2,AUTH-3", "--json", str(result_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    tests = json.loads(result_path.read_text())["tests"]
    assert {test["outcome"] for test in tests} == {"skipped"}
    assert all("SASL" in test["message"] for test in tests), tests
