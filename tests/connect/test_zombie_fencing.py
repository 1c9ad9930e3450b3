"""KIP-618 zombie fencing: before a new generation of an exactly-once source connector's tasks
runs, the leader fences the transactional producers of the previous generation's task ids and
records the new task count in the config topic (tasks-fencing-<connector>).

The zombie is a real transactional producer holding task 1's transactional id with an open
transaction, as a task on a frozen or partitioned worker would; the connector shrinks from two
tasks to one, so no new task initialises that id and only the fencing can stop the zombie."""
from __future__ import annotations

import json
import os

import pytest
from confluent_kafka import KafkaException, Producer

from connect_helpers import (ConnectProcess, committed_values, distributed_properties, read_topic, wait_for)

PLUGINS_DIR = os.path.join(os.path.dirname(__file__), "plugins")
RECORDS_PER_SLOT = 150


def task_states(worker, connector: str) -> list[str]:
    status, body = worker.rest("GET", f"/connectors/{connector}/status")
    return [t["state"] for t in body["tasks"]] if status == 200 else []


def task_count_record(broker, cluster: str, connector: str) -> dict | None:
    records = dict(read_topic(broker, f"{cluster}-configs"))
    value = records.get(f"tasks-fencing-{connector}".encode())
    return None if value is None else json.loads(value)


@pytest.mark.guarantee("CON-2")
def test_a_shrinking_exactly_once_source_fences_the_dropped_task_ids_zombie(broker, workers, tmp_path):
    cluster, connector, topic = "fencing", "seq", "fenced-seq"
    for index in (1, 2):
        path = distributed_properties(tmp_path, broker, index, cluster)
        with open(path, "a") as f:
            f.write(f"exactly.once.source.support=enabled\nplugin.path={PLUGINS_DIR}\n")
        workers.append(ConnectProcess("distributed", path, log_path=str(tmp_path / f"worker{index}.log")).start())
    config = {"connector.class": "SequenceSource", "topic": topic, "slots": "2",
              "records.per.slot": str(RECORDS_PER_SLOT), "tasks.max": "2"}
    status, body = wait_for(lambda: (lambda r: r[0] != 409 and r)(workers[0].rest(
        "PUT", f"/connectors/{connector}/config", config)), what="the connector created")
    assert status == 201, body
    wait_for(lambda: len(committed_values(broker, topic)) >= 40, what="records of both tasks committed")
    # first generation: nothing to fence, the count recorded
    assert task_count_record(broker, cluster, connector) == {"task-count": 2}

    assert workers[1].rest("PUT", f"/connectors/{connector}/pause")[0] == 202
    wait_for(lambda: task_states(workers[0], connector) == ["PAUSED", "PAUSED"], what="both tasks PAUSED")
    zombie = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{cluster}-{connector}-1"})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    assert zombie.flush(30) == 0  # in the log, in an open transaction

    assert workers[1].rest("PUT", f"/connectors/{connector}/config", {**config, "tasks.max": "1"})[0] == 200
    wait_for(lambda: task_count_record(broker, cluster, connector) == {"task-count": 1},
             what="the fencing of the second generation recorded")
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    assert raised.value.args[0].fatal(), raised.value  # fenced: this producer can never write again

    assert workers[0].rest("PUT", f"/connectors/{connector}/resume")[0] == 202
    expected = sorted(f"s{slot}-{seq:05d}".encode() for slot in range(2) for seq in range(RECORDS_PER_SLOT))
    wait_for(lambda: len(committed_values(broker, topic)) >= len(expected), what="every record committed")
    # one task took both slots over from the committed offsets: each record once, the zombie's none
    assert sorted(committed_values(broker, topic)) == expected
