"""The conformance suite catches each historical bug the reference can re-create.

For every `kspec.bug.*` switch (reference/config.py), a reference started with the switch on
fails the suite test that observes it, with an "expected ...; seen ..." message. The same
tests pass against references with every switch off: test_conformance_runs.py runs the whole
suite against a single node and a 3-node cluster.

`kspec.bug.truncation=hw` (before KIP-101) loses acknowledged records only when a follower
truncates to a stale high watermark and then leads before it fetches again: the suite stages
that by pausing and resuming nodes (test_replication.py, KIP-101's first scenario). The
kip101 value (before KIP-279) loses records only when logs diverged over several leader epochs;
the suite has no schedule for that, tests/replication/test_replication_scenarios.py replays it
against the replica core, and spec's explorer finds it.
"""
from __future__ import annotations

from dataclasses import fields

import pytest
from suite_process import BUG_SWITCHES, reference, run_suite

from reference.config import BrokerConfig

CLIENT = "confluent-kafka"  # the client-parametrised tests are not the ones that observe a switch


def test_every_switch_of_the_reference_is_accounted_for():
    switches = {f.name.replace("_", ".") for f in fields(BrokerConfig) if f.name.startswith("kspec_bug_")}
    assert switches == set(BUG_SWITCHES)


@pytest.mark.parametrize("switch", list(BUG_SWITCHES))
def test_the_suite_fails_against_a_reference_with_the_switch_on(switch, tmp_path):
    kind, test_name = BUG_SWITCHES[switch].kind, BUG_SWITCHES[switch].test
    overrides = {**BUG_SWITCHES[switch].overrides, switch: BUG_SWITCHES[switch].value}
    with reference(kind, tmp_path, overrides) as (bootstrap, extra):
        exit_code, document, stdout = run_suite(bootstrap, tmp_path, "--only", test_name, "--client", CLIENT, *extra)
    outcomes = {t["test"]: t for t in document["tests"]}
    assert set(outcomes) == {test_name}, stdout[-3000:]
    assert outcomes[test_name]["outcome"] == "failed" and exit_code == 1, outcomes[test_name]
    verdict = f"{' '.join(outcomes[test_name]['guarantees'])}: expected "  # the guarantee ids, then the check's words
    assert outcomes[test_name]["message"].startswith(verdict), outcomes[test_name]["message"]

