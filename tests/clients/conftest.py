"""A `kspec broker` process for the client acceptance tests, and small admin helpers."""
from __future__ import annotations

import socket

import pytest

from reference.process import BrokerProcess
from reference.protocol.api_keys import ApiKey
from reference.protocol.messages import decode_response, encode_request
from reference.protocol.framing import FrameDecoder

API_VERSIONS_V3 = 3


class RunningBroker:
    def __init__(self, process: BrokerProcess) -> None:
        self.process = process

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """The broker's advertised ApiVersions table, asked over a raw socket with kspec's codec."""
        host, port = self.bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(encode_request(ApiKey.API_VERSIONS, API_VERSIONS_V3, 1, "kspec-tests",
                                        {"client_software_name": "kspec-tests", "client_software_version": "0"}))
            decoder = FrameDecoder(16 * 1024 * 1024)
            while not (frames := decoder.feed(sock.recv(65536))):
                pass
        _, body = decode_response(ApiKey.API_VERSIONS, API_VERSIONS_V3, bytes(frames[0]))
        return {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}

    def supports_groups(self) -> bool:
        return ApiKey.FIND_COORDINATOR in self.api_versions()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(str(tmp_path_factory.mktemp("broker") / "data")) as process:
        yield RunningBroker(process)


@pytest.fixture
def admin_create_topic(broker):
    from confluent_kafka.admin import AdminClient, NewTopic

    def create(topic: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                                config=config or {})])
        for future in futures.values():
            future.result(30)

    return create
