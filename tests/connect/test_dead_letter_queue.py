"""errors.tolerance=all with a dead letter queue (KIP-298): a sink record whose value the
JsonConverter cannot read is skipped, produced as consumed to errors.deadletterqueue.topic.name
with Connect's __connect.errors.* context headers, and the records around it reach the sink."""
from __future__ import annotations

from confluent_kafka import Producer

from connect_helpers import ConnectProcess, lines_of, wait_for, write_properties
from test_standalone import worker_properties


def test_a_record_the_converter_rejects_goes_to_the_dead_letter_queue_with_its_context(broker, workers, tmp_path):
    topic, dlq, sink_file = "dlq-input", "dlq-input-dead-letters", tmp_path / "out.txt"
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for value in (b'{"n": 1}', b"not json{", b'{"n": 3}'):
        producer.produce(topic, value=value, key=b"k", headers=[("origin", b"test")])
    assert producer.flush(30) == 0
    sink = write_properties(tmp_path / "sink.properties", {
        "name": "tolerant-sink", "connector.class": "FileStreamSink", "file": sink_file, "topics": topic,
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.topic.replication.factor": "1",
        "errors.deadletterqueue.context.headers.enable": "true"})
    workers.append(ConnectProcess("standalone", worker_properties(tmp_path, broker), sink,
                                  log_path=str(tmp_path / "worker.log")).start())
    wait_for(lambda: len(lines_of(sink_file)) == 2, what="the two good records in the sink file")
    assert lines_of(sink_file) == ["{'n': 1}", "{'n': 3}"]  # the sink writes each value as its string form

    def dead_letters():
        try:
            return read_topic_with_headers(broker, dlq)
        except KeyError:  # the topic not created yet
            return []
    (key, value, headers), = wait_for(dead_letters, what="the bad record in the dead letter queue")
    assert (key, value) == (b"k", b"not json{")
    context = dict(headers)
    assert context["origin"] == b"test"  # the record's own headers kept
    assert context["__connect.errors.topic"] == topic.encode()
    assert context["__connect.errors.partition"] == b"0" and context["__connect.errors.offset"] == b"1"
    assert context["__connect.errors.connector.name"] == b"tolerant-sink"
    assert context["__connect.errors.task.id"] == b"0"
    assert context["__connect.errors.stage"] == b"VALUE_CONVERTER"
    assert context["__connect.errors.class.name"].endswith(b"JsonConverter")
    assert context["__connect.errors.exception.message"] and context["__connect.errors.exception.stacktrace"]
    status = workers[0].rest("GET", "/connectors/tolerant-sink/status")[1]
    assert status["tasks"][0]["state"] == "RUNNING"  # tolerated: the task lives on


def read_topic_with_headers(broker, topic: str) -> list[tuple]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "dlq-reader", "enable.auto.commit": False})
    try:
        if topic not in consumer.list_topics(timeout=10).topics:
            raise KeyError(topic)
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, low)])
        records = []
        while len(records) < high - low:
            message = consumer.poll(20)
            assert message is not None and message.error() is None
            records.append((message.key(), message.value(), message.headers()))
        return records
    finally:
        consumer.close()
