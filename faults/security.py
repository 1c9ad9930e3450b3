"""Fault runs against secured brokers.

`kspec faults run --command-config FILE`: client properties in librdkafka's names
(security.protocol, sasl.mechanism, sasl.username, sasl.password, ssl.ca.location, ...), read and
checked by conformance/client_properties.py, go to every client the run makes: they ride on
WorkloadOptions.client_properties and Target.client_properties, are merged into the librdkafka
clients' configs, and are used by the raw wire clients (faults/audit.py,
faults/epochs.py) through conformance/sasl.py's connect, which does the TLS and SASL exchange.

`kspec faults run --secure`: the reference nodes get what `kspec cluster --secure` gives them
(kspec/ops/cluster.py secure_overrides): certificates made for the run in <run>/pki, whose server
certificate names every node's address as a SubjectAltName, so clients check the host as they do
by default; a SASL_SSL listener for clients and between brokers; a SASL_SSL controller listener
for the quorum; StandardAuthorizer with the admin as the super user. The admin's client
properties (<run>/client.properties, mode 0600) are the run's client properties.
"""
from __future__ import annotations

from pathlib import Path

from faults.net import Network
from faults.proxy import ToxiproxyClient
from faults.targets import (ReferenceNode, Target, TargetError, create_proxies, free_port, placements,
                            reference_overrides)

PASSWORD_SHOWN = "[hidden]"  # what results.json says in place of a secret


def without_secrets(properties: dict[str, str]) -> dict[str, str]:
    return {k: PASSWORD_SHOWN if "password" in k else v for k, v in properties.items()}


def secure_reference_target(nodes: int, run_dir: Path, mode: str, network: Network | None = None,
                            toxiproxy: ToxiproxyClient | None = None,
                            overrides: dict[str, str] | None = None) -> Target:
    """The reference nodes of faults/targets.py reference_target, each with a SASL_SSL listener
    (the first, so its address is the node's bootstrap) and a SASL_SSL CONTROLLER listener on the
    next port, which controller.quorum.voters names."""
    from kspec.ops.cluster import CLIENT_PROPERTIES, secure_overrides
    from reference.config import read_properties_file
    if nodes < 2:
        raise TargetError("--secure starts a cluster with a SASL_SSL controller quorum: give --nodes 2 or more")
    spots = placements(nodes, mode, network, None)
    if toxiproxy is not None:
        create_proxies(toxiproxy, spots)
    controller_ports = [spot.port + 1 if mode == "netns" else free_port() for spot in spots]
    security = secure_overrides(str(run_dir), tuple({a for s in spots for a in (s.host, s.advertised_host)}))
    cluster = reference_overrides(nodes, ",".join(f"{i + 1}@{s.host}:{p}"
                                                  for i, (s, p) in enumerate(zip(spots, controller_ports))))
    broker_nodes = []
    for index, (spot, controller_port) in enumerate(zip(spots, controller_ports)):
        node_overrides = {**cluster, **security, **(overrides or {}),
                          "advertised.listeners": f"SASL_SSL://{spot.advertised_host}:{spot.port},"
                                                  f"CONTROLLER://{spot.host}:{controller_port}"}
        broker_nodes.append(ReferenceNode(str(run_dir / f"node-{index}"),
                                          listen=f"SASL_SSL://{spot.host}:{spot.port},"
                                                 f"CONTROLLER://{spot.host}:{controller_port}",
                                          node_id=index + 1, overrides=node_overrides,
                                          stderr_path=str(run_dir / f"node-{index}.log"), wrap=spot.wrap))
    return Target("reference", broker_nodes, mode, network, toxiproxy,
                  client_properties=read_properties_file(str(run_dir / CLIENT_PROPERTIES)))
