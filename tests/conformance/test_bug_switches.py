"""The conformance suite catches each historical bug the reference can re-create.

For every `kspec.bug.*` switch (reference/config.py), a reference started with the switch on
fails the suite test that observes it, with an "expected ...; seen ..." message. The same
tests pass against references with every switch off: test_conformance_runs.py runs the whole
suite against a single node and a 3-node cluster.

`kspec.bug.truncation` (hw: before KIP-101; kip101: before KIP-279) has no suite test. It
changes how a follower truncates after a leader change; in a KRaft cluster a restarted broker
leaves the ISR until it has caught up, so the old rules lose acknowledged records only when a
follower truncates and its new leader dies before it fetches again. A suite that can only stop
and start nodes cannot arrange that moment reliably; tests/replication/
test_replication_scenarios.py replays those scenarios against the replica core, and spec's
explorer finds them.
"""
from __future__ import annotations

from dataclasses import fields

import pytest
from suite_process import BUG_SWITCHES, reference, run_suite

from reference.config import BrokerConfig

NOT_OBSERVABLE_BY_THE_SUITE = {"kspec.bug.truncation"}
CLIENT = "confluent-kafka"  # the client-parametrised tests are not the ones that observe a switch
# A follower a test stops stays in the ISR for the whole test, however loaded the machine.
SLOW_FAILURE_DETECTION = {"broker.session.timeout.ms": "60000", "replica.lag.time.max.ms": "60000"}


def test_every_switch_of_the_reference_is_accounted_for():
    switches = {f.name.replace("_", ".") for f in fields(BrokerConfig) if f.name.startswith("kspec_bug_")}
    assert switches == set(BUG_SWITCHES) | NOT_OBSERVABLE_BY_THE_SUITE


@pytest.mark.parametrize("switch", list(BUG_SWITCHES))
def test_the_suite_fails_against_a_reference_with_the_switch_on(switch, tmp_path):
    kind, test_name = BUG_SWITCHES[switch]
    with reference(kind, tmp_path, {**SLOW_FAILURE_DETECTION, switch: "true"}) as (bootstrap, extra):
        exit_code, document, stdout = run_suite(bootstrap, tmp_path, "--only", test_name, "--client", CLIENT, *extra)
    outcomes = {t["test"]: t for t in document["tests"]}
    assert set(outcomes) == {test_name}, stdout[-3000:]
    assert outcomes[test_name]["outcome"] == "failed" and exit_code == 1, outcomes[test_name]
    assert outcomes[test_name]["message"].startswith("AssertionError: expected "), outcomes[test_name]["message"]

