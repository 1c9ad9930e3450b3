"""State survives restarts: clean stops (SIGTERM), kill -9 mid-produce, and torn segment tails."""
from __future__ import annotations

import glob
import os
import threading

from reference.process import BrokerProcess
from reference.protocol.api_keys import ApiKey
from reference.protocol.errors import ErrorCode
from reference.protocol.records import iter_batches

from .conftest import RawClient
from .helpers import batch_of, create_topic, fetch, list_offset, produce


def read_values(client, topic: str, partition: int = 0) -> list[bytes]:
    values, offset = [], list_offset(client, topic, -2, partition).offset
    end = list_offset(client, topic, -1, partition).offset
    while offset < end:
        answer = fetch(client, topic, offset, partition=partition)
        for batch in iter_batches(answer.records):
            values += [r.value for r in batch.records() if r.offset >= offset]
            offset = batch.last_offset + 1
    return values


def test_topics_configs_records_and_producer_ids_survive_a_clean_restart(tmp_path):
    broker = BrokerProcess(str(tmp_path / "data"))
    broker.start()
    client = RawClient(broker.bootstrap)
    topic_id = create_topic(client, "durable", partitions=2, configs={"retention.ms": "3600000"}).topic_id
    client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": 2, "resource_name": "durable",
        "configs": [{"name": "segment.bytes", "config_operation": 0, "value": "300"}]}], "validate_only": False})
    for i in range(20):
        produce(client, "durable", batch_of([b"r%d" % i]), partition=i % 2)
    first_producer_id = client.request(ApiKey.INIT_PRODUCER_ID, 0, {"transactional_id": None,
                                                                    "transaction_timeout_ms": 1000}).producer_id
    client.close()
    assert broker.stop() == 0
    assert glob.glob(str(tmp_path / "data" / "durable-0" / ".kafka_cleanshutdown"))
    broker.start()
    client = RawClient(broker.bootstrap)
    metadata = client.request(ApiKey.METADATA, 12, {"topics": [{"name": "durable"}],
                                                    "allow_auto_topic_creation": False}).topics[0]
    assert (metadata.topic_id, len(metadata.partitions)) == (topic_id, 2)
    configs = client.request(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [{
        "resource_type": 2, "resource_name": "durable", "configuration_keys": ["retention.ms", "segment.bytes"]}],
        "include_synonyms": False}).results[0].configs
    assert {c.name: c.value for c in configs} == {"retention.ms": "3600000", "segment.bytes": "300"}
    assert read_values(client, "durable", 0) == [b"r%d" % i for i in range(0, 20, 2)]
    assert read_values(client, "durable", 1) == [b"r%d" % i for i in range(1, 20, 2)]
    assert len(glob.glob(str(tmp_path / "data" / "durable-0" / "*.log"))) > 1  # segment.bytes=300 rolled
    second_producer_id = client.request(ApiKey.INIT_PRODUCER_ID, 0, {"transactional_id": None,
                                                                     "transaction_timeout_ms": 1000}).producer_id
    assert second_producer_id > first_producer_id
    client.close()
    assert broker.stop() == 0


def test_every_acked_record_is_readable_after_kill_9_mid_produce(tmp_path):
    broker = BrokerProcess(str(tmp_path / "data"))
    broker.start()
    setup = RawClient(broker.bootstrap)
    create_topic(setup, "killed")
    setup.close()
    acked: dict[int, bytes] = {}

    def produce_until_killed():
        client = RawClient(broker.bootstrap)
        try:
            for i in range(100_000):
                value = b"value-%d" % i
                answer = produce(client, "killed", batch_of([value]))
                assert answer.error_code == ErrorCode.NONE
                acked[answer.base_offset] = value
        except (ConnectionError, OSError):
            pass

    producer = threading.Thread(target=produce_until_killed)
    producer.start()
    while len(acked) < 300:
        threading.Event().wait(0.01)
    broker.kill()
    producer.join()
    broker.start()
    client = RawClient(broker.bootstrap)
    stored = read_values(client, "killed")
    assert all(stored[offset] == value for offset, value in acked.items()), "an acked record was lost"
    client.close()
    assert broker.stop() == 0


def test_a_torn_segment_tail_is_truncated_to_the_last_whole_batch(tmp_path):
    broker = BrokerProcess(str(tmp_path / "data"))
    broker.start()
    client = RawClient(broker.bootstrap)
    create_topic(client, "torn")
    for i in range(5):
        produce(client, "torn", batch_of([b"batch-%d" % i, b"more"]))
    client.close()
    broker.kill()  # no clean-shutdown marker: the next start recovers the active segment
    (segment,) = glob.glob(str(tmp_path / "data" / "torn-0" / "*.log"))
    with open(segment, "r+b") as f:
        f.truncate(os.path.getsize(segment) - 7)  # the last batch is torn
    broker.start()
    client = RawClient(broker.bootstrap)
    assert list_offset(client, "torn", -1).offset == 8
    assert produce(client, "torn", batch_of([b"after"])).base_offset == 8
    assert read_values(client, "torn")[-3:] == [b"batch-3", b"more", b"after"]
    client.close()
    assert broker.stop() == 0
