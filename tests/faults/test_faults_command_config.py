"""`kspec faults run --target FILE.toml --command-config FILE`: a TOML-described broker that
accepts SASL clients only, and a run whose every client (producers, consumers, admin, the epoch
observer's and the replica audit's wire clients) authenticates with the given properties."""
from __future__ import annotations

import json
import textwrap

import pytest

from faults.run import RunOptions, run
from faults.workload import WorkloadOptions
from faults_helpers import brokers_of
from spec.history import ops_from_table, read_history

USER, PASSWORD = "faults-user", "faults-secret"
CLIENT_PROPERTIES = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                     "sasl.username": USER, "sasl.password": PASSWORD}


@pytest.mark.timeout(90)
def test_a_sasl_only_toml_target_runs_with_the_command_config_properties(namespaces_available, tmp_path):
    target_file = tmp_path / "sasl-broker.toml"
    jaas = (f'org.apache.kafka.common.security.plain.PlainLoginModule required username=\\"{USER}\\" '
            f'password=\\"{PASSWORD}\\" user_{USER}=\\"{PASSWORD}\\";')
    target_file.write_text(textwrap.dedent(f"""\
        nodes = 1
        start = ["{{python}}", "-m", "kspec.cli", "broker", "--listen", "SASL_PLAINTEXT://{{host}}:{{port}}",
                 "--data-dir", "{{data_dir}}", "--node-id", "{{node_id}}",
                 "--set", "advertised.listeners=SASL_PLAINTEXT://{{advertised_host}}:{{port}}",
                 "--set", "sasl.enabled.mechanisms=PLAIN",
                 "--set", "listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}"]
        """))
    out_dir = tmp_path / "run"
    result = run(RunOptions(target=str(target_file), nemeses=("kill",), time_limit_s=8, interval_s=2, quiet_s=1,
                            network="netns", client_properties=CLIENT_PROPERTIES,
                            workload=WorkloadOptions(concurrency=4, rate_hz=60)), out_dir)
    assert result.final_reads_complete and result.acked_missing == 0 and not result.workload_failures
    ops = [op for op in ops_from_table(read_history(out_dir / "history.parquet")) if op.type != "invoke"]
    assert sum(op.f == "send" and op.type == "ok" for op in ops) > 50
    assert any(op.f == "leader-epochs" and op.type == "ok" for op in ops)  # Metadata over SASL (wire client)
    results = json.loads((out_dir / "results.json").read_text())
    assert results["replica_audit"]["reads"] == 8 and results["replica_audit"]["unread"] == 0, results["replica_audit"]
    assert PASSWORD not in (out_dir / "results.json").read_text()
    assert brokers_of(out_dir) == []
