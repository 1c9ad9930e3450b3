"""The conformance suite run as users run it, `kspec conformance ...` in its own process, and the
reference targets the tests here run it against (one `kspec broker`, or a 3-node cluster whose
nodes the suite may stop, start, pause and resume)."""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from conformance.nodes import VERBS as NODE_VERBS
from conformance.nodes import LocalCluster
from reference.process import BrokerProcess

RUN_TIMEOUT_S = 300.0
CLUSTER_NODES = 3

# A follower a test stops stays in the ISR for the whole test, however loaded the machine.
SLOW_FAILURE_DETECTION = {"broker.session.timeout.ms": "60000", "replica.lag.time.max.ms": "60000"}
# The truncation scenario waits for a paused broker's session to run out: a short one keeps it quick.
QUICK_FENCING = {"broker.heartbeat.interval.ms": "500", "broker.session.timeout.ms": "6000"}


@dataclass(frozen=True)
class BugSwitch:
    """How one historical-bug switch of the reference (reference/config.py) is shown: the
    reference it needs, the suite test that observes it, the value that turns it on, and the
    timeouts of the reference it runs against."""
    kind: str  # "single", "cluster" or "secure"
    test: str
    value: str = "true"
    overrides: dict[str, str] = field(default_factory=lambda: SLOW_FAILURE_DETECTION)


BUG_SWITCHES = {
    "kspec.bug.ack.before.isr": BugSwitch("cluster", "test_acks_all_is_not_acknowledged_while_an_in_sync_replica_is_down"),
    "kspec.bug.read.above.hw": BugSwitch("cluster", "test_a_record_only_the_leader_has_is_not_served"),
    "kspec.bug.count.fenced.follower.into.hw": BugSwitch("cluster", "test_a_fetch_in_another_leader_epoch_is_refused"),
    "kspec.bug.serve.aborted.to.read.committed": BugSwitch("single", "test_read_committed_sees_committed_records_only"),
    "kspec.bug.late.produce.joins.next.transaction":
        BugSwitch("single", "test_a_transactional_write_to_a_partition_not_in_the_transaction_is_refused"),
    "kspec.bug.truncation": BugSwitch(
        "cluster", "test_a_follower_behind_on_the_high_watermark_keeps_acknowledged_records_through_two_leader_changes",
        value="hw", overrides=QUICK_FENCING),
    "kspec.bug.acl.skip.produce": BugSwitch("secure", "test_denied_operations_are_refused_and_change_nothing"),
    "kspec.bug.follower.fetch.without.cluster.action":
        BugSwitch("secure", "test_a_client_cannot_act_as_a_replica_or_a_broker"),
}
# "secure": one node whose SASL_PLAINTEXT listener offers PLAIN (the administrator, a super user)
# and SCRAM (the unprivileged users the security tests make), with the StandardAuthorizer
SECURE_ADMIN_PASSWORD = "admin-secret"
SECURE_PROPERTIES = {
    "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config":
        f'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="{SECURE_ADMIN_PASSWORD}";',
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin",
}
SECURE_CLIENT = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "admin",
                 "sasl.password": SECURE_ADMIN_PASSWORD}


def run_suite(bootstrap: str, out_dir: Path, *extra: str) -> tuple[int, dict, str]:
    """(exit code, the JSON result, stdout) of `kspec conformance --bootstrap-servers bootstrap extra...`."""
    json_path = out_dir / "conformance.json"
    done = subprocess.run(
        [sys.executable, "-m", "kspec.cli", "conformance", "--bootstrap-servers", bootstrap,
         "--json", str(json_path), *extra],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=out_dir)
    assert json_path.exists(), f"no result (exit {done.returncode}): {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.returncode, json.loads(json_path.read_text()), done.stdout


@contextlib.contextmanager
def reference(kind: str, base_dir: Path, overrides: dict[str, str] | None = None):
    """A running reference, "single" (one node) or "cluster" (3 nodes): yields (bootstrap, the
    suite's extra arguments: node commands for a cluster)."""
    assert kind in ("single", "cluster", "secure"), kind
    if kind == "secure":
        with BrokerProcess(str(base_dir / "broker"), listen="SASL_PLAINTEXT://127.0.0.1:0",
                           overrides={**SECURE_PROPERTIES, **(overrides or {})}) as broker:
            yield broker.bootstrap, [f"--client-property={k}={v}" for k, v in SECURE_CLIENT.items()]
    elif kind == "single":
        with BrokerProcess(str(base_dir / "broker"), overrides=overrides) as broker:
            yield broker.bootstrap, []
    else:
        with LocalCluster(str(base_dir / "cluster"), CLUSTER_NODES, overrides) as cluster:
            yield cluster.bootstrap, [f"--node-{verb}-command={cluster.command(verb)}" for verb in NODE_VERBS]
