"""The stream processor a `--workload quixstreams` run puts under faults: a Quix Streams
application, exactly-once, counting the records of each key.

    python -m faults.streams_app --bootstrap HOST:PORT --topics t0,t1 --state-dir DIR --instance N

It is the application a Quix Streams user writes from the library's documentation, run
unchanged: `processing_guarantee="exactly-once"` (one Kafka transaction per checkpoint
holding the outputs, the state's changelog records and the consumed offsets), state in
RocksDB under --state-dir with its changelog topic, a count per key. It reads the queue
workload's topics (faults/workload.py: 8-byte big-endian key and value). Each input record
(key k, value v) yields one output, keyed by k, with the JSON value
{"key": k, "count": n, "input": v, "instance": N}: n is the key's count after v, N the
number of this process in the run (the harness starts a new one, with a new empty state
dir, after every kill), so the checker can tell which process wrote an output and where a
restart restored the state from the changelog (spark_validation/eos.py).

The harness kills it with SIGKILL (a crash) and stops it with SIGTERM, on which Quix Streams
commits its last checkpoint and exits. --processing-file tells the harness when the process
has processed its first input, so that a kill lands while it processes, not while it starts.
"""
from __future__ import annotations

import argparse
import struct

APP_GROUP = "kspec-eos-counter"      # the consumer group, and part of the changelog topics' names
OUTPUT_TOPIC = "eos-output"
COMMIT_INTERVAL_S = 0.5              # a checkpoint (one transaction) every half second
TRANSACTION_TIMEOUT_MS = 20_000      # the longest a transaction of a process that died stays open
# How long a record may wait for its Produce to be acknowledged (librdkafka would take the transaction
# timeout): below the transaction timeout, so a process that gives up on a write aborts its transaction
# itself (EndTxn) before its coordinator would abort it and fence the producer.
MESSAGE_TIMEOUT_MS = 10_000
SESSION_TIMEOUT_MS = 6_000           # how long a killed process stays in the group (librdkafka's default: 45 s)
# One application member, restarted after each kill: a stable transactional.id (Quix Streams draws a
# random one) lets the next process fence its predecessor and abort its open transaction at once
# (InitProducerId), and a static group member id (KIP-345) lets it take over the partitions at once.
MEMBER_ID = f"{APP_GROUP}-0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topics", required=True, help="comma-separated input topics")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--instance", type=int, required=True)
    parser.add_argument("--processing-file", help="created when the first input has been processed")
    args = parser.parse_args()

    from quixstreams import Application

    def on_message_processed(topic: str, partition: int, offset: int) -> None:
        """Tell the harness, once, that this process restored its state and is processing."""
        nonlocal processing_told
        if args.processing_file and not processing_told:
            open(args.processing_file, "w").close()
            processing_told = True

    processing_told = False
    app = Application(
        broker_address=args.bootstrap, consumer_group=APP_GROUP, auto_offset_reset="earliest",
        processing_guarantee="exactly-once", state_dir=args.state_dir, commit_interval=COMMIT_INTERVAL_S,
        producer_extra_config={"transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                               "message.timeout.ms": MESSAGE_TIMEOUT_MS, "transactional.id": MEMBER_ID},
        consumer_extra_config={"session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 1000,
                               "group.instance.id": MEMBER_ID},
        on_message_processed=on_message_processed, loglevel="INFO")
    outputs = app.topic(OUTPUT_TOPIC, key_serializer="bytes", value_serializer="json")

    def count(value: bytes, key: bytes, timestamp: int, headers, state) -> dict:
        n = state.get("count", 0) + 1
        state.set("count", n)
        (k,), (v,) = struct.unpack(">q", key), struct.unpack(">q", value)
        return {"key": k, "count": n, "input": v, "instance": args.instance}

    for topic in args.topics.split(","):  # one dataframe, and one state store, per input topic
        inputs = app.topic(topic, key_deserializer="bytes", value_deserializer="bytes")
        app.dataframe(inputs).apply(count, stateful=True, metadata=True).to_topic(outputs)
    app.run()


if __name__ == "__main__":
    main()
