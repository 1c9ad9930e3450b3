"""The conformance suite run as users run it, `kspec conformance ...` in its own process, and the
reference targets the tests here run it against (one `kspec broker`, or a 3-node cluster whose
nodes the suite may stop and start)."""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

from conformance.nodes import LocalCluster
from reference.process import BrokerProcess

RUN_TIMEOUT_S = 300.0
CLUSTER_NODES = 3

# Each historical-bug switch of the reference (reference/config.py) -> the reference it needs and
# the suite test that observes it. kspec.bug.truncation has none (see test_bug_switches.py).
BUG_SWITCHES = {
    "kspec.bug.ack.before.isr": ("cluster", "test_acks_all_is_not_acknowledged_while_an_in_sync_replica_is_down"),
    "kspec.bug.read.above.hw": ("cluster", "test_a_record_only_the_leader_has_is_not_served"),
    "kspec.bug.count.fenced.follower.into.hw": ("cluster", "test_a_fetch_in_another_leader_epoch_is_refused"),
    "kspec.bug.serve.aborted.to.read.committed": ("single", "test_read_committed_sees_committed_records_only"),
    "kspec.bug.late.produce.joins.next.transaction":
        ("single", "test_a_transactional_write_to_a_partition_not_in_the_transaction_is_refused"),
}


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
    assert kind in ("single", "cluster"), kind
    if kind == "single":
        with BrokerProcess(str(base_dir / "broker"), overrides=overrides) as broker:
            yield broker.bootstrap, []
    else:
        with LocalCluster(str(base_dir / "cluster"), CLUSTER_NODES, overrides) as cluster:
            yield cluster.bootstrap, ["--node-stop-command", cluster.command("stop"),
                                      "--node-start-command", cluster.command("start")]
