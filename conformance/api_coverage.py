"""Advertised against answered: every API version a broker lists in ApiVersions gets one minimal
valid request, and must be answered at that version on the same connection.

A minimal request is the message definition's defaults (empty arrays, zero numbers, empty
strings) with the few fields a broker must not act on set so that it cannot: acks=-1 (an acks=0
Produce gets no answer), no fetch wait, broker and replica ids of -1 and a cluster id no cluster
has (so an inter-broker or KRaft request is refused, never obeyed). The broker may refuse such a
request with any error code: what counts is an answer that decodes at the version sent, with the
request's correlation id, on an open connection, and not UNSUPPORTED_VERSION for a version it
advertised. One Finding (conformance.wire) per version that fails, and the connection is renewed.

    coverage = probe_api(wire, ApiKey.FETCH, advertised=(4, 18))
    coverage.failed     # {version: the finding}
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from conformance.wire import Finding, WireClient, request_name
from reference.protocol import schema
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode

PROBE_CLUSTER_ID = "kspec-api-coverage-no-such-cluster"
PROBE_TIMEOUT_MS = 1000
PROBE_ANSWER_S = 5.0  # a minimal request asks for no waiting: its answer is due at once
# Top-level request fields a minimal request sets (when its version has them) so that the broker
# answers at once and changes nothing.
MINIMAL_FIELDS = {
    "acks": -1, "timeout_ms": PROBE_TIMEOUT_MS, "max_wait_ms": 0, "replica_id": -1, "broker_id": -1,
    "broker_epoch": -1, "session_epoch": -1, "cluster_id": PROBE_CLUSTER_ID, "voter_id": -1,
    "client_software_name": "kspec-conformance", "client_software_version": "1", "mechanism": "PLAIN",
}
# APIs whose minimal request could still change a cluster, whatever ids it carries.
NOT_PROBED = {ApiKey.BROKER_REGISTRATION: "a registration request registers a broker"}


@dataclass
class ApiCoverage:
    """One API: what the broker advertises and what became of one request per version."""
    api_key: int
    name: str
    advertised: tuple[int, int]
    answered: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)  # version -> finding
    not_probed: dict[int, str] = field(default_factory=dict)  # version -> why not

    def to_json(self) -> dict:
        row = asdict(self)
        row["failed"] = {str(v): m for v, m in self.failed.items()}
        row["not_probed"] = {str(v): m for v, m in self.not_probed.items()}
        return row


def minimal_request(api_key: int, api_version: int) -> dict:
    """The MINIMAL_FIELDS the request has at this version; the codec fills in every other default."""
    layout = schema.layout(api_key, api_version, schema.REQUEST)
    names = {f.name for f in layout.fields + layout.tagged_fields}
    return {name: value for name, value in MINIMAL_FIELDS.items() if name in names}


def probe_api(wire: WireClient, api_key: int, advertised: tuple[int, int]) -> ApiCoverage:
    try:
        name = ApiKey(api_key).name
    except ValueError:
        name = f"API key {api_key}"
    coverage = ApiCoverage(api_key, name, advertised)
    low, high = advertised
    for version in range(low, high + 1):
        reason = _not_probed(api_key, version)
        if reason:
            coverage.not_probed[version] = reason
            continue
        try:
            response = wire.request(api_key, version, minimal_request(api_key, version), timeout_s=PROBE_ANSWER_S)
        except Finding as finding:
            coverage.failed[version] = str(finding)
            continue
        if response.get("error_code") == ErrorCode.UNSUPPORTED_VERSION:
            coverage.failed[version] = (f"{request_name(api_key, version)}: answered UNSUPPORTED_VERSION (35) for a "
                                        "version the broker advertises; Kafka serves every version it lists in "
                                        "ApiVersions (KIP-35)")
            continue
        coverage.answered.append(version)
    return coverage


def _not_probed(api_key: int, version: int) -> str | None:
    if api_key in NOT_PROBED:
        return NOT_PROBED[api_key]
    try:
        codec_low, codec_high = schema.valid_versions(api_key)
    except KeyError:
        return "kspec's codec has no definition of this API"
    if not codec_low <= version <= codec_high:
        return f"kspec's codec knows v{codec_low}-v{codec_high} only"
    return None
