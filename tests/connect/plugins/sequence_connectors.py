"""A source connector whose work splits over tasks: `slots` numbered sequences, dealt round-robin
over at most `tasks.max` tasks. Slot k's records are the values "s<k>-<seq>" for seq 0, 1, ...
up to `records.per.slot`; its source partition is {"slot": k} and its offset {"seq": next seq},
so a task that takes a slot over (another task count, a restart) continues where the committed
offset says. Loaded through plugin.path."""
import threading

from connect.api import STRING_SCHEMA, ConfigKey, SourceConnector, SourceRecord, SourceTask

RECORDS_PER_POLL = 10
POLL_INTERVAL_S = 0.05


class SequenceSourceConnector(SourceConnector):
    CONFIG_DEF = (ConfigKey("topic", required=True), ConfigKey("slots", "INT", 2),
                  ConfigKey("records.per.slot", "INT", 1000))

    def start(self, props):
        self.props = dict(props)

    def task_class(self):
        return SequenceSourceTask

    def task_configs(self, max_tasks):
        slots = int(self.props.get("slots", 2))
        dealt = [[k for k in range(slots) if k % max_tasks == t] for t in range(min(max_tasks, slots))]
        return [{**self.props, "task.slots": ",".join(map(str, mine))} for mine in dealt]


class SequenceSourceTask(SourceTask):
    def start(self, props):
        self.topic = props["topic"]
        self.limit = int(props.get("records.per.slot", 1000))
        self.next_seq = {}
        for slot in (int(k) for k in props["task.slots"].split(",")):
            offset = self.context.offset_storage_reader.offset({"slot": slot})
            self.next_seq[slot] = offset["seq"] if offset else 0
        self.stopping = threading.Event()

    def poll(self):
        self.stopping.wait(POLL_INTERVAL_S)
        records = []
        for slot, first in self.next_seq.items():
            for seq in range(first, min(first + RECORDS_PER_POLL, self.limit)):
                records.append(SourceRecord(self.topic, None, None, None, STRING_SCHEMA, f"s{slot}-{seq:05d}",
                                            source_partition={"slot": slot}, source_offset={"seq": seq + 1}))
                self.next_seq[slot] = seq + 1
        return records

    def stop(self):
        self.stopping.set()
