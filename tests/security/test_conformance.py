"""`kspec conformance` against a SASL_SSL broker, with the client properties on the command line:
the security area (AUTH-1, AUTH-2, AUTH-3) runs and passes; on the same broker's PLAINTEXT
listener it is skipped, naming what it needs. Both runs go at once."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.security.conftest import PASSWORDS

TIMEOUT_S = 300


def run_security_area(bootstrap: str, result_path, *client_properties: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "kspec.cli", "conformance", "--bootstrap-servers", bootstrap,
         "--only", "AUTH-1,AUTH-2,AUTH-3", "--json", str(result_path),
         *(f"--client-property={pair}" for pair in client_properties)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_security_area_passes_on_sasl_ssl_and_is_skipped_on_plaintext(secure_broker, pki, tmp_path):
    secured = run_security_area(secure_broker.listeners["SASL_SSL"], tmp_path / "sasl_ssl.json",
                                "security.protocol=SASL_SSL", "sasl.mechanism=PLAIN", "sasl.username=admin",
                                f"sasl.password={PASSWORDS['admin']}", f"ssl.ca.location={pki.ca_path}")
    plain = run_security_area(secure_broker.listeners["PLAINTEXT"], tmp_path / "plaintext.json")
    for run in (secured, plain):
        output, _ = run.communicate(timeout=TIMEOUT_S)
        assert run.returncode == 0, output[-3000:]
    tests = json.loads((tmp_path / "sasl_ssl.json").read_text())["tests"]
    assert sorted(test["outcome"] for test in tests) == ["passed"] * 3, tests
    tests = json.loads((tmp_path / "plaintext.json").read_text())["tests"]
    assert {test["outcome"] for test in tests} == {"skipped"}
    assert all("SASL" in test["message"] for test in tests), tests
