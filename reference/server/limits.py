"""Connection quotas, as Kafka's SocketServer ConnectionQuotas: how many client connections a
node holds in all (`max.connections`) and from one address (`max.connections.per.ip`).

Sans-IO: the acceptor asks `admit(ip)` for each new connection and calls `release(ip)` when
it ends. A connection over the per-address limit is refused (the acceptor closes it at once);
at the node-wide limit the acceptor stops accepting until a connection ends, as Kafka's
Acceptor waits for a slot, so the kernel's backlog holds the rest.
"""
from __future__ import annotations

from collections import Counter


class ConnectionQuotas:
    def __init__(self, max_connections: int, max_connections_per_ip: int) -> None:
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.open_by_ip: Counter[str] = Counter()
        self.open_total = 0

    @property
    def full(self) -> bool:
        """max.connections reached: accept nothing until a connection ends."""
        return self.open_total >= self.max_connections

    def admit(self, ip: str) -> bool:
        """Count a new connection from `ip`, or refuse it (False) when `ip` has its maximum."""
        assert not self.full, "the acceptor waits while the node is full"
        if self.open_by_ip[ip] >= self.max_connections_per_ip:
            return False
        self.open_by_ip[ip] += 1
        self.open_total += 1
        return True

    def release(self, ip: str) -> None:
        assert self.open_by_ip[ip] > 0 and self.open_total > 0, ip
        self.open_by_ip[ip] -= 1
        if not self.open_by_ip[ip]:
            del self.open_by_ip[ip]
        self.open_total -= 1
