"""KafkaBasedLog (connect/kafkalog.py) waits for its topic's partitions before it starts, as
Kafka's KafkaBasedLog.start does.

In a 3-node fault run the first worker created the config topic and asked for its partitions at
once; the broker that answered had not replayed the creation yet (LEADER_NOT_AVAILABLE, no
partitions: against a fresh 3-node reference cluster, 1 to 5 creations in 100). The log then
read no partition at all and its read_to_end returned at once: the worker, leader of its Connect
group, wrote each connector config it was sent without ever reading it back (404 to every PUT),
and as a follower that did read them advertised a larger config offset, every assignment failed
(CONFIG_MISMATCH): 1,630 rebalances in a minute and the Connect lane skipped. Here a real broker
answers, and the first two answers for the new topic are made the lagging broker's."""
from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from connect import kafkalog
from connect.kafkalog import KafkaBasedLog

LAGGING_ANSWERS = 2


class LaggingAdmin(AdminClient):
    """A real admin client whose first answers about one topic are a lagging broker's."""
    topic: str | None = None
    lagged = 0

    def list_topics(self, topic=None, *args, **kwargs):
        answer = super().list_topics(topic, *args, **kwargs)
        if topic is not None and topic == LaggingAdmin.topic and LaggingAdmin.lagged < LAGGING_ANSWERS:
            LaggingAdmin.lagged += 1
            metadata = answer.topics[topic]
            metadata.partitions, metadata.error = {}, "LEADER_NOT_AVAILABLE"  # what it says before replaying the creation
        return answer


@pytest.fixture
def lagging_admin(monkeypatch):
    monkeypatch.setattr(kafkalog, "AdminClient", LaggingAdmin)
    LaggingAdmin.lagged = 0
    yield LaggingAdmin
    LaggingAdmin.topic = None


@pytest.mark.guarantee("CON-1")
def test_a_log_whose_new_topic_has_no_partitions_yet_waits_for_them_and_reads_what_it_writes(
        broker, lagging_admin, tmp_path):
    topic = lagging_admin.topic = "lagging-configs"
    client = {"bootstrap.servers": broker.bootstrap}
    records = []
    log = KafkaBasedLog(topic, {"admin": client, "producer": client, "consumer": client}, records.append,
                        partitions=1, replication_factor=1)
    try:
        log.send(b"connector-lines", b'{"properties":{}}')
        log.flush()
        log.read_to_end()
        assert [(m.key(), m.value()) for m in records] == [(b"connector-lines", b'{"properties":{}}')]
        assert lagging_admin.lagged == LAGGING_ANSWERS  # it asked again until the partitions were known
        assert [tp.partition for tp in log.partitions] == [0]
    finally:
        log.stop()
