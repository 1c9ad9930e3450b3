"""Both node classes implement the whole BrokerNode interface (reference/node/interface.py),
so handlers, the coordinators' runtime and the shell never ask which node they have."""
from __future__ import annotations

import inspect

from reference.node.broker import Broker
from reference.node.cluster import ClusterBroker
from reference.node.interface import BrokerNode

INTERFACE = {name for name, _ in inspect.getmembers(BrokerNode) if not name.startswith("_")}
INTERFACE |= set(BrokerNode.__annotations__)


def test_the_interface_names_what_handlers_use():
    assert {"append", "partition", "led_partitions", "partition_leader", "create_topic", "allocate_producer_id",
            "image", "config"} <= INTERFACE


def test_a_single_node_and_a_cluster_node_implement_all_of_it_with_the_same_signatures():
    for node_class in (Broker, ClusterBroker):
        missing = sorted(name for name in INTERFACE if name not in BrokerNode.__annotations__
                         and not hasattr(node_class, name))
        assert not missing, f"{node_class.__name__} lacks {missing}"
        for name in INTERFACE - set(BrokerNode.__annotations__):
            declared, implemented = getattr(BrokerNode, name), getattr(node_class, name)
            if inspect.isfunction(declared):
                assert list(inspect.signature(implemented).parameters) == list(inspect.signature(declared).parameters), (
                    f"{node_class.__name__}.{name}")
