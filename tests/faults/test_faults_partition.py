"""A partition is real: a broker cut off by iptables DROP leaves its clients timing out,
and they recover once the partition heals."""
from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from faults.net import HOST, Network
from faults.targets import reference_target
from faults_helpers import network_name

DELIVERY_TIMEOUT_MS = 2000
CREATE_TIMEOUT_S = 60.0
TOPIC = "isolation"


def produce_one(bootstrap: str, value: bytes) -> str | None:
    """Send one record with a short delivery timeout; the error, or None when acked."""
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": DELIVERY_TIMEOUT_MS,
                         "acks": "all", "log_level": 0})
    outcome = []
    producer.produce(TOPIC, value=value, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(DELIVERY_TIMEOUT_MS / 1000 + 5)
    assert len(outcome) == 1
    return None if outcome[0] is None else str(outcome[0])


@pytest.mark.timeout(90)
def test_clients_of_a_partitioned_broker_time_out_and_recover_after_heal(namespaces_available, tmp_path):
    network = Network(network_name(), nodes=1, state_dir=tmp_path / "state")
    target = None
    try:
        network.create()
        target = reference_target(1, tmp_path, "netns", network=network)
        target.start()
        assert target.bootstrap.startswith(network.node_address(0))
        admin = AdminClient({"bootstrap.servers": target.bootstrap})  # fault-run targets do not auto-create topics
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(CREATE_TIMEOUT_S)
        assert produce_one(target.bootstrap, b"before") is None
        target.partition({0: {HOST}})
        error = produce_one(target.bootstrap, b"during")
        assert error is not None and "timed out" in error.lower(), error
        target.heal()
        assert produce_one(target.bootstrap, b"after") is None
    finally:
        if target is not None:
            target.stop()
        network.destroy()
