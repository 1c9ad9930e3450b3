"""The auth lane of a lanes run (faults/lanes.py): AUTH-1, AUTH-2 and AUTH-3 probed under the nemesis.

Every node of a lanes run on the reference gets, beside its PLAINTEXT listener (which the other
lanes and the nodes themselves keep using, unchanged), a SASL_PLAINTEXT listener offering
SCRAM-SHA-256, and the StandardAuthorizer (`add_sasl_listener`):

    listeners=PLAINTEXT://<host>:<port>,SASL_PLAINTEXT://<host>:<port + 1>
    authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
    super.users=User:ANONYMOUS          the PLAINTEXT listener's principal: the other lanes and
                                        the nodes' own traffic, as deployments that keep a
                                        PLAINTEXT inter-broker listener configure it
    allow.everyone.if.no.acl.found      left false (Kafka's default): a SASL user may do only
                                        what an ACL allows

A `--secure` run's nodes already have a SASL_SSL listener and the authorizer (faults/security.py),
and the lane uses them as they are. In proxy mode the SASL listener is reached directly, not
through the nodes' proxies, so only kills and pauses reach the lane there.

The lane (`AuthWorkload`) makes, as the run's administrator, two SCRAM users and two topics of its
own with ACLs: topic A allows the writer everything and DENIES the intruder everything; topic B
allows the writer READ only and nobody writes to it, ever. Through the main phase, under the
nemesis, it sends one probe after another to the nodes in turn, each recorded as an op of
f="auth" whose extra says the guarantee, the probe, the node, the principal and what came back:

| guarantee | probe | refused when |
|---|---|---|
| AUTH-1 | Metadata before any SaslHandshake | the connection closes unanswered |
| AUTH-1 | Produce to A (its leader) after SaslHandshake, before SaslAuthenticate | closed, or ILLEGAL_SASL_STATE |
| AUTH-1 | Metadata after a failed authentication (a wrong password) | closed unanswered |
| AUTH-2 | the intruder's Produce to A (DENY) and to B (no ACL for it), at the leader | TOPIC_AUTHORIZATION_FAILED |
| AUTH-2 | the intruder's Fetch of A, CreateTopics of C, DeleteTopics of A, DeleteRecords of A | TOPIC_AUTHORIZATION_FAILED |
| AUTH-2 | the writer's Produce to B (READ only), at the leader | TOPIC_AUTHORIZATION_FAILED |
| AUTH-3 | the writer's Fetch and OffsetForLeaderEpoch as a replica (replica id set) | TOPIC_AUTHORIZATION_FAILED |
| AUTH-3 | the writer's WriteTxnMarkers to B | CLUSTER_AUTHORIZATION_FAILED |
| AUTH-3 | the writer's BrokerHeartbeat (on the controller listener where there is one) | closed, or CLUSTER_AUTHORIZATION_FAILED |

A probe refused so is type "fail" (it did not happen); one the node served, or answered with
another error (a node authorizes before anything else, so that answer shows the request went
past authorization), is "ok" (a violation); anything else (a node down or paused, no answer, a
forwarded request's controller unreachable) is "info", with what came back. Between the probes the writer produces to A as a client allowed to (f="send"), so the
history shows the ACLs let through what they allow. The probes' records carry values of their
own, in the op's send rows. After the run the final reads, as the administrator, read A and B
from every partition's leader (f="poll", as every lane's final reads), and record what a denied
operation could have changed (f="auth-final"): whether C exists, whether A still does, the log
start offsets of A, the control batches in A and B. spark_validation/auth.py turns this history
into AUTH-1..3 held or violated, with the ops as evidence.
"""
from __future__ import annotations

import itertools
import json
import os
import random
import struct
import threading
import time
from dataclasses import dataclass
from typing import Callable

from conformance import ops, sasl
from conformance.capabilities import discover
from conformance.wire import ConnectionClosed, Finding, WireClient, WireTimeout, error_name
from faults.workload import CLIENT_LOGGER, WorkloadOptions
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from spec.history import Poll, Record, Send

AUTH_F = "auth"                   # a probe's op
FINAL_F = "auth-final"            # what the final reads found a denied operation could have changed
AUTH_FILE = "auth.json"           # beside the lane's history: its topics, users and ACLs (marks an auth lane)
SASL_LISTENER = "SASL_PLAINTEXT"  # the listener a lanes run adds
SECURE_LISTENER = "SASL_SSL"      # a --secure run's
CONTROLLER_LISTENER = "CONTROLLER"
MECHANISM, ITERATIONS = "SCRAM-SHA-256", 4096
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
LANE_BROKER_PROPERTIES = {
    "authorizer.class.name": STANDARD_AUTHORIZER,
    "super.users": "User:ANONYMOUS",
    "listener.name.sasl_plaintext.sasl.enabled.mechanisms": MECHANISM,
}
WRITER, INTRUDER = "kspec-auth-writer", "kspec-auth-intruder"
PROBE_TIMEOUT_S = 3.0             # a probe's connection and each of its requests
SETUP_TIMEOUT_S = 60.0            # users, topics and ACLs made and every node logging the users in
REQUEST_TIMEOUT_MS = 2000
VALUE_BASE = 1 << 40              # the lane's record values: unique, apart from any other lane's
PRODUCE_VERSION, FETCH_VERSION, METADATA_VERSION = 7, 11, 4
# what a refusal looks like, per probe
TOPIC_DENIED, CLUSTER_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def add_sasl_listener(target) -> None:
    """Before the nodes start: a SASL_PLAINTEXT listener on each reference node (the next port on
    its address in netns mode, a free one in proxy mode), SCRAM-SHA-256 and the authorizer. A
    secured run's nodes (with an authorizer already) and nodes that are not reference processes
    are left as they are."""
    from faults.targets import ReferenceNode, free_port
    for node in target.nodes:
        if not isinstance(node, ReferenceNode) or "authorizer.class.name" in node.overrides or "://" in node.listen:
            continue
        host, _, port = node.listen.rpartition(":")
        sasl_port = int(port) + 1 if target.mode == "netns" else free_port()
        node.listen = f"PLAINTEXT://{host}:{port},{SASL_LISTENER}://{host}:{sasl_port}"
        node.overrides = {**LANE_BROKER_PROPERTIES, **node.overrides}  # the run's --set wins


def unavailable(target) -> str | None:
    """Why the lane cannot run against this target (None: it can)."""
    if not all(_sasl_address(node) for node in target.nodes):
        return ("needs every node to have a SASL listener and the authorizer: the reference target gets "
                f"them in a lanes run ({SASL_LISTENER}) or with --secure")
    return None


def _sasl_address(node) -> str | None:
    listeners = getattr(node, "listeners", {})
    return listeners.get(SECURE_LISTENER) or listeners.get(SASL_LISTENER)


@dataclass(frozen=True)
class Answer:
    """What a probe got: refused (as Kafka refuses it), served (it happened), or unknown."""
    outcome: str   # refused, served, unknown
    said: str      # what came back, for people

    @property
    def type(self) -> str:
        return {"refused": "fail", "served": "ok", "unknown": "info"}[self.outcome]


def _by_code(code: int, refusal: int, forwarded: bool = False) -> Answer:
    """A node authorizes a request before anything else (Kafka's KafkaApis; reference/security/checks.py),
    so any other error shows it went past authorization: served. Only a request the node forwards
    to the controller (CreateTopics, DeleteTopics) may fail on the way (the controller unreachable)."""
    if code == refusal:
        return Answer("refused", error_name(code))
    if code == ErrorCode.NONE:
        return Answer("served", "NONE")
    if forwarded:
        return Answer("unknown", error_name(code))
    return Answer("served", f"{error_name(code)}, not its authorization error: taken past authorization")


def _value_bytes(value: int) -> bytes:
    return struct.pack(">q", value)


def _value_of(raw: bytes | None) -> int | None:
    return struct.unpack(">q", raw)[0] if raw is not None and len(raw) == 8 else None


class AuthWorkload:
    """The lane's workload, driven through the run's phases as every lane's is (faults/lanes.py)."""

    def __init__(self, target, recorder, options: WorkloadOptions, seed: int = 0) -> None:
        assert len(options.topics) == 2, "the auth lane has two topics: A and B"
        self.target = target
        self.recorder = recorder
        self.options = options
        self.seed = seed
        self.rng = random.Random(seed)
        self.topic_a, self.topic_b = options.topics
        self.topic_c = f"{self.topic_a}-created-by-intruder"
        self.admin_properties = dict(options.client_properties)  # the run's: a super user
        self.passwords = {WRITER: os.urandom(12).hex(), INTRUDER: os.urandom(12).hex()}
        self.next_process = itertools.count()
        self.values = itertools.count(VALUE_BASE + (options.key_base << 24))
        self.failures: list[str] = []
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.probes: list[tuple[str, str, Callable]] = [
            ("AUTH-1", "request-before-handshake", self._before_handshake),
            ("AUTH-1", "produce-before-authentication", self._produce_before_authentication),
            ("AUTH-1", "request-after-failed-authentication", self._after_failed_authentication),
            ("AUTH-2", "produce-denied", self._produce_denied),
            ("AUTH-2", "fetch-denied", self._fetch_denied),
            ("AUTH-2", "create-topic-denied", self._create_denied),
            ("AUTH-2", "delete-topic-denied", self._delete_denied),
            ("AUTH-2", "delete-records-denied", self._delete_records_denied),
            ("AUTH-2", "produce-read-only", self._produce_read_only),
            ("AUTH-3", "replica-fetch", self._replica_fetch),
            ("AUTH-3", "replica-offset-for-leader-epoch", self._replica_offset_for_leader_epoch),
            ("AUTH-3", "write-txn-markers", self._write_txn_markers),
            ("AUTH-3", "controller-rpc", self._controller_rpc),
        ]

    # -- the run's phases

    def create_topics(self) -> None:
        """Users, topics and ACLs, as the administrator; then wait until every node logs the users in."""
        from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                           ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                           UserScramCredentialUpsertion)
        admin = AdminClient({"bootstrap.servers": self.target.bootstrap, "logger": CLIENT_LOGGER, **self.admin_properties})
        deadline = time.monotonic() + SETUP_TIMEOUT_S
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, ITERATIONS)
        self._until(deadline, "the lane's SCRAM users", lambda: [f.result() for f in admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, info, password.encode()) for user, password in self.passwords.items()]
        ).values()])
        self._until(deadline, "the lane's topics", lambda: self._create_topics(admin, NewTopic))
        acl = lambda topic, user, operation, permission: AclBinding(  # noqa: E731
            ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, f"User:{user}", "*", operation, permission)
        bindings = [acl(self.topic_a, WRITER, AclOperation.ALL, AclPermissionType.ALLOW),
                    acl(self.topic_a, INTRUDER, AclOperation.ALL, AclPermissionType.DENY),
                    acl(self.topic_b, WRITER, AclOperation.READ, AclPermissionType.ALLOW)]
        self._until(deadline, "the lane's ACLs", lambda: [f.result() for f in admin.create_acls(bindings).values()])
        for index in range(len(self.target.nodes)):
            self._until(deadline, f"node {index} logging the lane's users in",
                        lambda index=index: [self._connect(index, user).close() for user in self.passwords])
        self.write_setup()

    def _create_topics(self, admin, new_topic) -> None:
        from confluent_kafka import KafkaError, KafkaException
        futures = admin.create_topics([new_topic(t, 2, self.options.replication_factor)
                                       for t in (self.topic_a, self.topic_b)], operation_timeout=10)
        for future in futures.values():
            try:
                future.result()
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise

    @staticmethod
    def _until(deadline: float, what: str, attempt: Callable) -> None:
        while True:
            try:
                attempt()
                return
            except Exception as e:  # noqa: BLE001 - retried until the deadline, then named
                if time.monotonic() > deadline:
                    raise RuntimeError(f"auth lane: {what} not ready within {SETUP_TIMEOUT_S:.0f} s: {e}") from None
                time.sleep(0.5)

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="auth-lane", daemon=True)
        self.thread.start()

    def stop_invoking(self) -> None:
        self.stopping.set()

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join()

    def close(self) -> None:
        pass

    def _run(self) -> None:
        """One probe after another, at the lane's rate; the writer's own produce after each round."""
        process = next(self.next_process)
        interval_s = 1.0 / self.options.rate_hz
        for step in itertools.count():
            if self.stopping.is_set():
                return
            started = time.monotonic()
            node = (step // (len(self.probes) + 1)) % len(self.target.nodes)
            position = step % (len(self.probes) + 1)
            try:
                if position == len(self.probes):
                    self._writer_send(process, node)
                else:
                    self._probe(process, node, *self.probes[position])
            except Exception as e:  # noqa: BLE001 - a probe's own bug ends the lane's probing, named in results.json
                self.failures.append(f"auth lane: {type(e).__name__}: {e}")
                return
            self.stopping.wait(max(0.0, interval_s - (time.monotonic() - started)))

    def _probe(self, process: int, node: int, guarantee_id: str, probe: str, send: Callable) -> None:
        partition = self.rng.randrange(2)
        value = next(self.values)
        topic = self._probe_topic(probe)
        mops = (Send(Record(topic, partition, None, value)),) if "produce" in probe else ()
        extra = {"guarantee": guarantee_id, "probe": probe, "node": node, "listener": self._listener(node, probe),
                 "principal": self._principal(guarantee_id, probe), "topic": topic, "partition": partition}
        invocation = self.recorder.invoke(process, AUTH_F, mops=mops, extra=extra)
        try:
            answer = send(node, topic, partition, value)
        except (OSError, Finding, sasl.SaslFailed) as e:  # the node down, paused, cut off, or a broken answer
            answer = Answer("unknown", f"{type(e).__name__}: {e}")
        self.recorder.complete(invocation, answer.type, extra={**extra, "outcome": answer.outcome,
                                                               "answer": answer.said})

    def _probe_topic(self, probe: str) -> str:
        if probe == "create-topic-denied":
            return self.topic_c
        if probe in ("produce-read-only", "write-txn-markers"):
            return self.topic_b
        if probe == "produce-denied" and self.rng.random() < 0.5:  # B has no ACL for the intruder, A a DENY
            return self.topic_b
        return self.topic_a

    @staticmethod
    def _principal(guarantee_id: str, probe: str) -> str:
        if guarantee_id == "AUTH-1":
            return "unauthenticated"
        return f"User:{WRITER if guarantee_id == 'AUTH-3' or probe == 'produce-read-only' else INTRUDER}"

    def _listener(self, node: int, probe: str) -> str:
        listeners = self.target.nodes[node].listeners
        if probe == "controller-rpc" and CONTROLLER_LISTENER in listeners:
            return CONTROLLER_LISTENER
        return SECURE_LISTENER if SECURE_LISTENER in listeners else SASL_LISTENER

    def _writer_send(self, process: int, node: int) -> None:
        """The writer's produce to A, which its ACL allows, sent to the leader the node names: ok
        when the leader appended it."""
        partition, value = self.rng.randrange(2), next(self.values)
        invocation = self.recorder.invoke(process, "send", mops=(Send(Record(self.topic_a, partition, None, value)),))
        try:
            address = self._leader(node, self.topic_a, partition)
            if address is None:
                self.recorder.complete(invocation, "fail", extra={"error": f"no leader of {self.topic_a}-{partition}"})
                return
            with self._connect_to(address, WRITER) as wire:
                answered = self._produce(wire, self.topic_a, partition, value)
            code = answered.error_code
            offset = answered.base_offset if code == ErrorCode.NONE else None
            type_ = "ok" if code == ErrorCode.NONE else "fail" if code == TOPIC_DENIED else "info"
            sent = Send(Record(self.topic_a, partition, None, value, offset))
            self.recorder.complete(invocation, type_, mops=(sent,), extra={"error": error_name(code)})
        except (OSError, Finding, sasl.SaslFailed) as e:
            self.recorder.complete(invocation, "info", extra={"error": f"{type(e).__name__}: {e}"})

    # -- connections

    def _leader(self, node: int, topic: str, partition: int) -> str | None:
        """The partition's leader on the SASL listener, as the node tells the writer (who may
        describe A and B); None when it names none."""
        with self._connect(node, WRITER) as wire:
            metadata = wire.request(ApiKey.METADATA, METADATA_VERSION, {"topics": [{"name": topic}],
                                                                        "allow_auto_topic_creation": False})
        leader = next((p.leader_id for t in metadata.topics for p in t.partitions
                       if p.partition_index == partition), -1)
        return next((f"{b.host}:{b.port}" for b in metadata.brokers if b.node_id == leader), None)

    def _properties(self) -> dict[str, str]:
        """The SASL listener's security protocol, with the run's TLS settings (a --secure run's CA)."""
        protocol = SECURE_LISTENER if SECURE_LISTENER in self.target.nodes[0].listeners else SASL_LISTENER
        tls = {k: v for k, v in self.admin_properties.items() if k.startswith("ssl.")}
        return {"security.protocol": protocol, **tls}

    def _raw(self, node: int) -> WireClient:
        """A connection to the node's SASL listener, TLS done, nothing else said."""
        return self._wire(_sasl_address(self.target.nodes[node]))

    def _wire(self, address: str) -> WireClient:
        return WireClient(address, ssl_context=sasl.ssl_context(self._properties()), timeout_s=PROBE_TIMEOUT_S)

    def _connect(self, node: int, user: str, listener: str | None = None) -> WireClient:
        address = self.target.nodes[node].listeners[listener] if listener else _sasl_address(self.target.nodes[node])
        return self._connect_to(address, user)

    def _connect_to(self, address: str, user: str) -> WireClient:
        """A connection to the address, authenticated as the user."""
        wire = self._wire(address)
        try:
            sasl.authenticate(wire, MECHANISM, user, self.passwords[user])
        except BaseException:
            wire.close()
            raise
        return wire

    def _produce(self, wire: WireClient, topic: str, partition: int, value: int):
        response = wire.request(ApiKey.PRODUCE, PRODUCE_VERSION, ops.produce_body(
            topic, ops.values_batch([_value_bytes(value)]), partition, -1, timeout_ms=REQUEST_TIMEOUT_MS))
        return response.responses[0].partition_responses[0]

    # -- AUTH-1: nothing but the handshake before authentication

    @staticmethod
    def _unanswered(wire: WireClient) -> Answer:
        """After a request that must not be served: closed unanswered is the refusal."""
        try:
            frame = wire.receive_frame(PROBE_TIMEOUT_S)
        except ConnectionClosed:
            return Answer("refused", "connection closed unanswered")
        except WireTimeout:
            return Answer("unknown", f"no answer and no close within {PROBE_TIMEOUT_S:.0f} s")
        return Answer("served", f"answered with a {len(frame)}-byte response")

    def _metadata_request(self, wire: WireClient) -> None:
        wire.send(ApiKey.METADATA, METADATA_VERSION, {"topics": None, "allow_auto_topic_creation": False})

    def _before_handshake(self, node: int, topic: str, partition: int, value: int) -> Answer:
        with self._raw(node) as wire:
            self._metadata_request(wire)
            return self._unanswered(wire)

    def _produce_before_authentication(self, node: int, topic: str, partition: int, value: int) -> Answer:
        address = self._leader(node, topic, partition)
        if address is None:
            return Answer("unknown", f"no leader of {topic}-{partition} known")
        with self._wire(address) as wire:
            handshake = wire.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": MECHANISM})
            if handshake.error_code != ErrorCode.NONE:
                return Answer("unknown", f"SaslHandshake answered {error_name(handshake.error_code)}")
            try:
                code = self._produce(wire, topic, partition, value).error_code
            except ConnectionClosed:
                return Answer("refused", "connection closed unanswered")
            return _by_code(code, ErrorCode.ILLEGAL_SASL_STATE)

    def _after_failed_authentication(self, node: int, topic: str, partition: int, value: int) -> Answer:
        with self._raw(node) as wire:
            try:
                sasl.authenticate(wire, MECHANISM, INTRUDER, "not-" + self.passwords[INTRUDER])
                return Answer("served", "authenticated with a wrong password")
            except sasl.SaslFailed:
                pass
            self._metadata_request(wire)
            return self._unanswered(wire)

    # -- AUTH-2: denied operations refused with their authorization error

    def _produce_denied(self, node: int, topic: str, partition: int, value: int) -> Answer:
        return self._produce_as(INTRUDER, node, topic, partition, value)

    def _produce_read_only(self, node: int, topic: str, partition: int, value: int) -> Answer:
        return self._produce_as(WRITER, node, topic, partition, value)

    def _produce_as(self, user: str, node: int, topic: str, partition: int, value: int) -> Answer:
        """A refused produce, sent to the partition's leader: one served there is appended, and the
        final reads find it."""
        address = self._leader(node, topic, partition)
        if address is None:
            return Answer("unknown", f"no leader of {topic}-{partition} known")
        with self._connect_to(address, user) as wire:
            return _by_code(self._produce(wire, topic, partition, value).error_code, TOPIC_DENIED)

    def _fetch(self, user: str, node: int, topic: str, partition: int, replica_id: int) -> Answer:
        with self._connect(node, user) as wire:
            response = wire.request(ApiKey.FETCH, FETCH_VERSION, {
                "replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                    {"partition": partition, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                     "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""})
        data = response.responses[0].partitions[0]
        answer = _by_code(data.error_code, TOPIC_DENIED)
        if data.records:  # records served, whatever the error code says
            return Answer("served", f"{answer.said} with {len(data.records)} bytes of records")
        return answer

    def _fetch_denied(self, node: int, topic: str, partition: int, value: int) -> Answer:
        return self._fetch(INTRUDER, node, topic, partition, -1)

    def _create_denied(self, node: int, topic: str, partition: int, value: int) -> Answer:
        with self._connect(node, INTRUDER) as wire:
            response = wire.request(ApiKey.CREATE_TOPICS, 2, {"topics": [{
                "name": topic, "num_partitions": 1, "replication_factor": -1, "assignments": [], "configs": []}],
                "timeout_ms": REQUEST_TIMEOUT_MS, "validate_only": False})
        return _by_code(response.topics[0].error_code, TOPIC_DENIED, forwarded=True)

    def _delete_denied(self, node: int, topic: str, partition: int, value: int) -> Answer:
        with self._connect(node, INTRUDER) as wire:
            response = wire.request(ApiKey.DELETE_TOPICS, 1, {"topic_names": [topic], "timeout_ms": REQUEST_TIMEOUT_MS})
        return _by_code(response.responses[0].error_code, TOPIC_DENIED, forwarded=True)

    def _delete_records_denied(self, node: int, topic: str, partition: int, value: int) -> Answer:
        with self._connect(node, INTRUDER) as wire:
            response = wire.request(ApiKey.DELETE_RECORDS, 1, {"topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "offset": -1}]}], "timeout_ms": REQUEST_TIMEOUT_MS})
        return _by_code(response.topics[0].partitions[0].error_code, TOPIC_DENIED)

    # -- AUTH-3: a client principal acting as a replica or a controller

    def _other_node_id(self, node: int) -> int:
        ids = [n.node_id for n in self.target.nodes]
        return ids[(node + 1) % len(ids)]

    def _replica_fetch(self, node: int, topic: str, partition: int, value: int) -> Answer:
        return self._fetch(WRITER, node, topic, partition, self._other_node_id(node))

    def _replica_offset_for_leader_epoch(self, node: int, topic: str, partition: int, value: int) -> Answer:
        with self._connect(node, WRITER) as wire:
            response = wire.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, {
                "replica_id": self._other_node_id(node), "topics": [{"topic": topic, "partitions": [
                    {"partition": partition, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
        return _by_code(response.topics[0].partitions[0].error_code, TOPIC_DENIED)

    def _write_txn_markers(self, node: int, topic: str, partition: int, value: int) -> Answer:
        with self._connect(node, WRITER) as wire:
            response = wire.request(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
                "producer_id": VALUE_BASE + value % 1000, "producer_epoch": 0, "transaction_result": False,
                "coordinator_epoch": 0, "topics": [{"name": topic, "partition_indexes": [partition]}]}]})
        return _by_code(response.markers[0].topics[0].partitions[0].error_code, CLUSTER_DENIED)

    def _controller_rpc(self, node: int, topic: str, partition: int, value: int) -> Answer:
        """A BrokerHeartbeat for another node with no broker epoch: only the nodes may send it."""
        listener = self._listener(node, "controller-rpc")
        with self._connect(node, WRITER, listener if listener == CONTROLLER_LISTENER else None) as wire:
            try:
                response = wire.request(ApiKey.BROKER_HEARTBEAT, 1, {
                    "broker_id": self._other_node_id(node), "broker_epoch": -1, "current_metadata_offset": 0,
                    "want_fence": False, "want_shut_down": False})
            except ConnectionClosed:
                return Answer("refused", "connection closed unanswered")
        if response.error_code == CLUSTER_DENIED:
            return Answer("refused", error_name(response.error_code))
        return Answer("served", f"answered {error_name(response.error_code)}")

    # -- the final reads

    def final_reads(self, timeout_s: float) -> bool:
        """A and B read from every partition's leader as the administrator, and the state a denied
        operation could have changed; False when they did not complete within timeout_s."""
        process = next(self.next_process)
        deadline = time.monotonic() + timeout_s
        invocation = self.recorder.invoke(process, "poll")
        last_error = "no attempt"
        for attempt in itertools.count():
            try:
                records, state = self._read_everything(attempt % len(self.target.nodes))
                break
            except (OSError, Finding, sasl.SaslFailed, KeyError, IndexError) as e:
                last_error = f"{type(e).__name__}: {e}"
                if time.monotonic() > deadline:
                    self.recorder.complete(invocation, "info", extra={"error": last_error})
                    self.recorder.complete(self.recorder.invoke(process, FINAL_F), "info",
                                           extra={"error": last_error})
                    return False
                time.sleep(0.5)
        self.recorder.complete(invocation, "ok", mops=(Poll(tuple(records)),))
        self.recorder.complete(self.recorder.invoke(process, FINAL_F), "ok", extra=state)
        return True

    def write_setup(self) -> None:
        """auth.json: what the probes ran against, for the checker and for people."""
        (self.recorder.out_dir / AUTH_FILE).write_text(json.dumps({
            "listener": self._properties()["security.protocol"], "mechanism": MECHANISM,
            "topics": {"A": self.topic_a, "B": self.topic_b, "C": self.topic_c},
            "acls": [f"{self.topic_a}: ALLOW User:{WRITER} ALL, DENY User:{INTRUDER} ALL",
                     f"{self.topic_b}: ALLOW User:{WRITER} READ"],
            "principals": {"writer": f"User:{WRITER}", "intruder": f"User:{INTRUDER}"}}, indent=2) + "\n")

    def _read_everything(self, node: int) -> tuple[list[Record], dict]:
        address = self.target.nodes[node].bootstrap
        with sasl.connect(address, self.admin_properties, timeout_s=10.0) as admin:
            caps = discover(admin)
            metadata = admin.request(ApiKey.METADATA, METADATA_VERSION, {"topics": [
                {"name": t} for t in (self.topic_a, self.topic_b, self.topic_c)], "allow_auto_topic_creation": False})
        brokers = {b.node_id: f"{b.host}:{b.port}" for b in metadata.brokers}
        topics = {t.name: t for t in metadata.topics}
        records: list[Record] = []
        state: dict = {"topics_exist": {name: topics[name].error_code == ErrorCode.NONE for name in topics},
                       "log_start_offsets": {}, "control_batches": {}, "high_watermarks": {}}
        for topic in (self.topic_a, self.topic_b):
            for partition in sorted(topics[topic].partitions, key=lambda p: p.partition_index):
                if partition.leader_id < 0:
                    raise KeyError(f"{topic}-{partition.partition_index} has no leader")
                index = partition.partition_index
                with sasl.connect(brokers[partition.leader_id], self.admin_properties, timeout_s=10.0) as leader:
                    batches = ops.read_batches(leader, caps, topic, partition=index)
                    start = ops.list_offset(leader, caps, topic, ops.EARLIEST_TIMESTAMP, partition=index).offset
                    high_watermark = ops.high_watermark(leader, caps, topic, partition=index)
                name = f"{topic}-{index}"
                state["log_start_offsets"][name] = start
                state["high_watermarks"][name] = high_watermark
                state["control_batches"][name] = [b.base_offset for b in batches if b.is_control]
                records += [Record(topic, index, None, _value_of(r.value), r.offset)
                            for b in batches if not b.is_control for r in b.records()]
        return records, state

