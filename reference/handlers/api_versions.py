"""ApiVersions (key 18): the version ranges this broker implements (KIP-35, KIP-511).

An unsupported ApiVersions version never reaches this handler: the shell answers it with
the v0-body UNSUPPORTED_VERSION reply (KIP-511). v3+ requests name the client software;
names outside Kafka's pattern get INVALID_REQUEST, and librdkafka then retries with v0.
"""
from __future__ import annotations

import re

from reference.handlers.context import RequestContext
from reference.protocol.errors import ErrorCode

# ApiVersionsRequest.isValid: letters and digits, with '-' and '.' inside.
CLIENT_SOFTWARE_PATTERN = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def handle_api_versions(broker, request, context: RequestContext) -> dict:
    if context.api_version >= 3 and not (
        CLIENT_SOFTWARE_PATTERN.fullmatch(request.client_software_name or "")
        and CLIENT_SOFTWARE_PATTERN.fullmatch(request.client_software_version or "")
    ):
        return {"error_code": ErrorCode.INVALID_REQUEST, "api_keys": []}
    return {
        "error_code": ErrorCode.NONE,
        "api_keys": [
            {"api_key": int(key), "min_version": low, "max_version": high}
            for key, (low, high) in sorted(broker.advertised_api_versions(context.listener).items())
        ],
    }
