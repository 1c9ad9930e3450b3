"""What the broker under test offers, discovered at run time: never assumed.

`discover(bootstrap)` asks one broker for its ApiVersions (v0, which every broker answers)
and its Metadata, and returns a Capabilities value. Tests ask it before they run:

    version = capabilities.version_or_skip(ApiKey.DELETE_RECORDS, low=0, high=2)
    capabilities.require_brokers(2, "acks=all against min.insync.replicas")

and skip, with a one-line reason, when the broker cannot be tested for that behaviour. A skip
is never counted as a pass.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from conformance.wire import Finding, WireClient, error_name
from reference.protocol import schema
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

VERSION_ANY = 0x7FFF  # no upper bound of a caller's own (api_version is an int16)
METADATA_VERSION_RANGE = (1, 12)  # v1 adds controller_id; v12 is the last that takes topic names alone

CLASSIC_GROUP_APIS = (ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT,
                      ApiKey.LEAVE_GROUP, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH)
TRANSACTION_APIS = (ApiKey.FIND_COORDINATOR, ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN,
                    ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT)


@dataclass(frozen=True)
class BrokerNode:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Capabilities:
    api_versions: dict[int, tuple[int, int]]  # api key -> (min, max) the broker advertises
    brokers: tuple[BrokerNode, ...]
    controller_id: int
    cluster_id: str | None

    @property
    def broker_count(self) -> int:
        return len(self.brokers)

    def broker(self, node_id: int) -> BrokerNode | None:
        return next((b for b in self.brokers if b.node_id == node_id), None)

    def version(self, api_key: int, low: int = 0, high: int = VERSION_ANY) -> int | None:
        """The highest version of an API that the broker, kspec's codec and [low, high] all allow."""
        if api_key not in self.api_versions:
            return None
        codec_low, codec_high = schema.valid_versions(api_key)
        broker_low, broker_high = self.api_versions[api_key]
        best = min(high, codec_high, broker_high)
        return best if best >= max(low, codec_low, broker_low) else None

    def missing(self, *api_keys: int) -> list[str]:
        return [ApiKey(k).name for k in api_keys if k not in self.api_versions]

    def version_or_skip(self, api_key: int, low: int = 0, high: int = VERSION_ANY) -> int:
        found = self.version(api_key, low, high)
        if found is None:
            advertised = self.api_versions.get(api_key)
            wanted = f"v{low}+" if high == VERSION_ANY else f"v{low}-v{high}"
            pytest.skip(f"broker does not offer {ApiKey(api_key).name} {wanted}"
                        + (f" (advertises v{advertised[0]}-v{advertised[1]})" if advertised else ""))
        return found

    def require(self, what: str, *api_keys: int) -> None:
        missing = self.missing(*api_keys)
        if missing:
            pytest.skip(f"{what} needs {', '.join(missing)}, which the broker does not offer")

    def require_brokers(self, count: int, what: str) -> None:
        if self.broker_count < count:
            pytest.skip(f"{what} needs {count} brokers; the target has {self.broker_count}")

    @property
    def offers_classic_groups(self) -> bool:
        return not self.missing(*CLASSIC_GROUP_APIS)

    @property
    def offers_consumer_groups(self) -> bool:  # KIP-848
        return ApiKey.CONSUMER_GROUP_HEARTBEAT in self.api_versions

    @property
    def offers_transactions(self) -> bool:
        return not self.missing(*TRANSACTION_APIS)

    def summary(self) -> str:
        return (f"{self.broker_count} broker(s) {', '.join(b.address for b in self.brokers)}; "
                f"controller {self.controller_id}; {len(self.api_versions)} APIs; "
                f"classic groups {'yes' if self.offers_classic_groups else 'no'}, "
                f"KIP-848 groups {'yes' if self.offers_consumer_groups else 'no'}, "
                f"transactions {'yes' if self.offers_transactions else 'no'}")


def read_api_versions(wire: WireClient) -> dict[int, tuple[int, int]]:
    response = wire.request(ApiKey.API_VERSIONS, 0, {})
    if response.error_code != ErrorCode.NONE:
        raise Finding(f"API_VERSIONS v0 to {wire.address}: answered {error_name(response.error_code)}; every "
                      "Kafka broker answers ApiVersions v0 (KIP-35), the request every client opens with")
    return {entry.api_key: (entry.min_version, entry.max_version) for entry in response.api_keys}


def discover(wire: WireClient) -> Capabilities:
    api_versions = read_api_versions(wire)
    partial = Capabilities(api_versions, (), -1, None)
    metadata_version = partial.version(ApiKey.METADATA, *METADATA_VERSION_RANGE)
    if metadata_version is None:
        raise Finding(f"API_VERSIONS v0 to {wire.address}: advertises METADATA {api_versions.get(ApiKey.METADATA)}, "
                      f"no version in v{METADATA_VERSION_RANGE[0]}-v{METADATA_VERSION_RANGE[1]}; Kafka 4.x "
                      "offers Metadata v0-v13")
    metadata = wire.request(ApiKey.METADATA, metadata_version, {"topics": [], "allow_auto_topic_creation": False})
    brokers = tuple(sorted((BrokerNode(b.node_id, b.host, b.port) for b in metadata.brokers),
                           key=lambda b: b.node_id))
    return Capabilities(api_versions, brokers, metadata.controller_id, metadata.get("cluster_id"))
