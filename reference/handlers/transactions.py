"""Transaction APIs (KIP-98): InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn, WriteTxnMarkers, ListTransactions,
DescribeTransactions.

Each asks this node's transaction coordinator (reference/runtime/transactions.py:
TransactionCoordinatorRuntime, built by the shell), which answers NOT_COORDINATOR for ids
whose `__transaction_state` partition another node leads, COORDINATOR_LOAD_IN_PROGRESS while
it loads one, and CONCURRENT_TRANSACTIONS while an id's state records are not replicated.
EndTxn is answered once the Prepare record is replicated, after waiting a moment for the
markers. A TxnOffsetCommit is a transactional batch on the group's `__consumer_offsets`
partition; the group sees its offsets when the COMMIT marker lands (KIP-447).

Transaction version 1 (KIP-98 with KIP-890 part 1 verification) is what clients speak here:
EndTxn and TxnOffsetCommit stop below v5, AddPartitionsToTxn v4+ is the broker-to-broker
verification batch.
"""
from __future__ import annotations

import asyncio

from reference.coordinator.records import CONSUMER_OFFSETS_TOPIC, OffsetAndMetadata
from reference.coordinator.records import partition_for as offsets_partition_for
from reference.handlers.context import RequestContext
from reference.node.broker import TopicPartition
from reference.node.interface import BrokerNode
from reference.protocol.errors import ErrorCode
from reference.runtime.transactions import VERIFY_ONLY_BATCH_VERSION, TransactionCoordinatorRuntime
from reference.transaction.coordinator import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnEffects

END_TXN_COMPLETION_WAIT_MS = 3000  # how long EndTxn waits for the markers before it answers anyway


def _transactions(context: RequestContext) -> TransactionCoordinatorRuntime:
    transactions = context.services.transactions
    transactions.now_ms = context.now_ms
    return transactions


# ---------------------------------------------------------------------------------------------
# Handlers


def _fenced_before_v2(error: ErrorCode, api_version: int) -> ErrorCode:
    """PRODUCER_FENCED is new in v2 of the transaction APIs (KIP-588); older clients get INVALID_PRODUCER_EPOCH."""
    return ErrorCode.INVALID_PRODUCER_EPOCH if api_version < 2 and error == ErrorCode.PRODUCER_FENCED else error


def _response(error: ErrorCode, effects: TxnEffects | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": error,
            "producer_id": effects.producer_id if effects and not error else NO_PRODUCER_ID,
            "producer_epoch": effects.producer_epoch if effects and not error else NO_PRODUCER_EPOCH}


async def handle_init_producer_id_transactional(broker: BrokerNode, request, context: RequestContext) -> dict:
    node = _transactions(context)
    if error := node.serve(request.transactional_id, context.now_ms) or await node.reserve_producer_id():
        return _response(error)
    if error := node.error_for(request.transactional_id):  # asked again: the reservation awaited
        return _response(error)
    effects = node.coordinator.init_producer_id(
        request.transactional_id, request.transaction_timeout_ms, request.get("producer_id", NO_PRODUCER_ID),
        request.get("producer_epoch", NO_PRODUCER_EPOCH), context.now_ms)
    # A fenced open transaction is aborted first: CONCURRENT_TRANSACTIONS, and the client retries.
    error = await node.write(effects, context.now_ms) or effects.error
    return _response(_fenced_before_v2(error, context.api_version), effects)


async def handle_add_partitions_to_txn(broker: BrokerNode, request, context: RequestContext) -> dict:
    node = _transactions(context)
    if context.api_version >= VERIFY_ONLY_BATCH_VERSION:
        results = []
        for transaction in request.transactions:
            wanted = [(t.name, p) for t in transaction.topics for p in t.partitions]
            if transaction.verify_only:
                error = node.serve(transaction.transactional_id, context.now_ms)
                errors = {key: error for key in wanted} if error else node.coordinator.verify_partitions(
                    transaction.transactional_id, transaction.producer_id, transaction.producer_epoch, wanted)
            else:
                errors = await node.add_partitions(transaction.transactional_id, transaction.producer_id,
                                               transaction.producer_epoch, wanted, context.now_ms)
            results.append({"transactional_id": transaction.transactional_id,
                            "topic_results": _topic_results(wanted, errors)})
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results_by_transaction": results}
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    errors = await node.add_partitions(request.v3_and_below_transactional_id,
                                   request.v3_and_below_producer_id, request.v3_and_below_producer_epoch, wanted,
                                   context.now_ms)
    errors = {key: _fenced_before_v2(error, context.api_version) for key, error in errors.items()}
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _topic_results(wanted, errors)}


def _topic_results(wanted: list[tuple[str, int]], errors: dict[tuple[str, int], ErrorCode]) -> list[dict]:
    by_topic: dict[str, list[dict]] = {}
    for topic, partition in wanted:
        by_topic.setdefault(topic, []).append({"partition_index": partition,
                                               "partition_error_code": errors[topic, partition]})
    return [{"name": name, "results_by_partition": results} for name, results in by_topic.items()]


def _offsets_partition(broker: BrokerNode, group_id: str) -> TopicPartition:
    return TopicPartition(CONSUMER_OFFSETS_TOPIC,
                          offsets_partition_for(group_id, broker.config.offsets_topic_num_partitions))


async def handle_add_offsets_to_txn(broker: BrokerNode, request, context: RequestContext) -> dict:
    node = _transactions(context)
    offsets_partition = _offsets_partition(broker, request.group_id)
    errors = await node.add_partitions(request.transactional_id, request.producer_id,
                                   request.producer_epoch, [(offsets_partition.topic, offsets_partition.partition)],
                                   context.now_ms)
    (error,) = errors.values()
    return {"throttle_time_ms": 0, "error_code": _fenced_before_v2(error, context.api_version)}


async def handle_txn_offset_commit(broker: BrokerNode, request, context: RequestContext) -> dict:
    """On the group coordinator: write the offsets to the group's __consumer_offsets partition
    as part of the transaction (a transactional batch, acks=all); the group sees them when the
    commit marker lands."""
    node = _transactions(context)
    offsets = {(topic.name, p.partition_index): OffsetAndMetadata(
        p.committed_offset, p.get("committed_leader_epoch", -1), p.committed_metadata or "", context.now_ms)
        for topic in request.topics for p in topic.partitions}
    error = await node.commit_offsets(request.transactional_id, request.producer_id, request.producer_epoch,
                                      _offsets_partition(broker, request.group_id), request.group_id, offsets,
                                      context.now_ms)
    error = _fenced_before_v2(error, context.api_version)
    return {"throttle_time_ms": 0, "topics": [
        {"name": topic.name, "partitions": [{"partition_index": p.partition_index, "error_code": error}
                                            for p in topic.partitions]}
        for topic in request.topics]}


async def handle_end_txn(broker: BrokerNode, request, context: RequestContext) -> dict:
    node = _transactions(context)
    if error := node.serve(request.transactional_id, context.now_ms):
        return _response(error)
    effects = node.coordinator.end_transaction(request.transactional_id, request.producer_id, request.producer_epoch,
                                               request.committed, context.now_ms)
    error = await node.write(effects, context.now_ms) or effects.error
    completing = [node.completing[markers] for markers in effects.markers if markers in node.completing]
    if completing:
        # The outcome is decided once the Prepare record is replicated; waiting for the markers
        # as well spares the client's next transaction CONCURRENT_TRANSACTIONS and its back-off.
        await asyncio.wait(completing, timeout=END_TXN_COMPLETION_WAIT_MS / 1000)
    return _response(_fenced_before_v2(error, context.api_version), effects)


async def handle_write_txn_markers(broker: BrokerNode, request, context: RequestContext) -> dict:
    """Markers sent by a transaction coordinator on another broker."""
    node = _transactions(context)
    markers = []
    for marker in request.markers:
        wanted = [(topic.name, index) for topic in marker.topics for index in topic.partition_indexes]
        errors = await node.write_markers_here(marker.producer_id, marker.producer_epoch, marker.transaction_result,
                                               marker.coordinator_epoch, wanted, context.now_ms)
        markers.append({"producer_id": marker.producer_id, "topics": [
            {"name": topic.name, "partitions": [{"partition_index": index, "error_code": errors[topic.name, index]}
                                                for index in topic.partition_indexes]}
            for topic in marker.topics]})
    return {"markers": markers}


def handle_list_transactions(broker: BrokerNode, request, context: RequestContext) -> dict:
    """The transactions this node coordinates."""
    node = _transactions(context)
    node.follow_leadership(context.now_ms)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "unknown_state_filters": [],
            "transaction_states": node.coordinator.list_transactions(
                request.state_filters, request.producer_id_filters, request.get("duration_filter", -1),
                context.now_ms)}


def handle_describe_transactions(broker: BrokerNode, request, context: RequestContext) -> dict:
    node = _transactions(context)
    node.follow_leadership(context.now_ms)
    states = []
    for transactional_id in request.transactional_ids:
        described = node.coordinator.describe_transaction(transactional_id)
        if (error := node.error_for(transactional_id)) and error != ErrorCode.CONCURRENT_TRANSACTIONS:
            described["error_code"] = error
        states.append(described)
    return {"throttle_time_ms": 0, "transaction_states": states}
