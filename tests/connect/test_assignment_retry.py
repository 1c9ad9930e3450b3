"""A distributed worker whose assignment cannot be applied at once (its offsets topic not read to
its end in time, as while the cluster's brokers are killed or cut off) applies it at a later tick.

Under faults an exactly-once FileStreamSource stopped for good after its first batches: the worker
that was assigned the moved task marked it running before reading the offsets topic, the read
timed out, and the task never started; in every later rebalance the worker reported it as its
own, so the leader never dealt it elsewhere. Here a real herder (in this process, on a real
broker) sees its first offsets read time out while the task is assigned, and still runs it."""
from __future__ import annotations

import threading

import pytest

from connect.config import WorkerConfig, read_properties
from connect.distributed import DistributedHerder
from connect.plugins import Plugins
from connect.worker import TaskId
from connect_helpers import committed_values, distributed_properties, wait_for


@pytest.mark.guarantee("CON-2")
def test_a_source_task_assigned_while_the_offsets_topic_cannot_be_read_starts_once_it_can(broker, tmp_path):
    cluster = "offsets-unreadable"
    properties = read_properties(distributed_properties(tmp_path, broker, 1, cluster))
    config = WorkerConfig({**properties, "exactly.once.source.support": "enabled"}, "distributed")
    herder = DistributedHerder(config, Plugins(), "127.0.0.1:1", "http://127.0.0.1:1/")
    timeouts = []
    read_to_end = herder.offsets.log.read_to_end

    def first_read_times_out(*args, **kwargs):
        if not timeouts and threading.current_thread() is herder.thread and herder.task_props.get("lines"):
            timeouts.append("offsets")  # what KafkaBasedLog.read_to_end raises after READ_TO_END_TIMEOUT_S
            raise TimeoutError(f"{cluster}-offsets not read to its end within 30.0 s")
        return read_to_end(*args, **kwargs)

    herder.offsets.log.read_to_end = first_read_times_out
    try:
        wait_for(lambda: herder.is_leader, what="the worker leads its group")
        source = tmp_path / "in.txt"
        source.write_text("".join(f"line-{n}\n" for n in range(50)))
        herder.put_connector_config("lines", {"name": "lines", "connector.class": "FileStreamSource",
                                              "file": str(source), "topic": cluster}, allow_replace=False)
        wait_for(lambda: (s := herder.status.tasks.get(TaskId("lines", 0))) and s.state == "RUNNING",
                 what="task lines-0 RUNNING")
        assert timeouts == ["offsets"], "the task's first assignment met the timeout"
        wait_for(lambda: len(committed_values(broker, cluster)) >= 50, what="the 50 lines committed in the topic")
        assert sorted(committed_values(broker, cluster)) == sorted(f"line-{n}".encode() for n in range(50))
    finally:
        herder.stop()
