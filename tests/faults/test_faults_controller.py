"""kill:controller aims at the active controller: the fault harness asks the quorum (DescribeQuorum,
KIP-595) which node leads it. Metadata's ControllerId will not do: it names a live broker, which
forwards admin requests (KIP-590), also while the quorum has no leader."""
from __future__ import annotations

import pytest

from faults.net import Network
from faults.targets import reference_target
from faults_helpers import network_name, wait_until
from reference.process import cluster_metadata

WAIT_S = 60.0


@pytest.mark.timeout(120)
def test_the_target_names_the_quorum_leader_and_none_while_the_quorum_has_no_leader(namespaces_available, tmp_path):
    network = Network(network_name(), nodes=2, state_dir=tmp_path / "state")
    target = None
    try:
        network.create()
        target = reference_target(2, tmp_path, "netns", network=network)
        target.start()
        target.wait_until_serving()
        assert wait_until(lambda: target.controller() is not None, WAIT_S), "no active controller"
        controller = target.controller()
        follower = 1 - controller
        target.kill(follower)
        survivor = target.nodes[controller]
        # alone of two voters, the leader resigns once it hears from no majority, and no election can end
        assert wait_until(lambda: target.controller() is None, WAIT_S), "the survivor still leads the quorum"
        metadata = cluster_metadata(survivor.bootstrap)
        assert metadata is not None and metadata.controller_id == survivor.node_id  # a live broker, not a leader
        target.restart(follower)
        assert wait_until(lambda: target.controller() is not None, WAIT_S), "no controller after the restart"
    finally:
        if target is not None:
            target.stop()
        network.destroy()
