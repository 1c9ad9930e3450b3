"""FileStreamSource and FileStreamSink: the example connectors Kafka ships (connect/file).

Source: reads `file` line by line into `topic`, at most `batch.size` lines per poll; its
source partition is {"filename": file} and its offset {"position": byte offset after the
line}, so a restarted task resumes after the last committed line. One task.
Sink: appends each record's value and a newline to `file` and fsyncs on flush.
"""
from __future__ import annotations

import os
import threading

from connect.api import (ConfigKey, ConnectError, SinkConnector, SinkTask, SourceConnector, SourceRecord,
                         SourceTask, STRING_SCHEMA)

IDLE_WAIT_S = 1.0  # a source poll that found no new line waits this long, as Kafka's does
FILE_KEY = ConfigKey("file", documentation="Source filename. If not specified, the standard input will be used",
                     importance="HIGH")


class FileStreamSourceConnector(SourceConnector):
    CONFIG_DEF = (FILE_KEY,
                  ConfigKey("topic", "LIST", required=True, importance="HIGH",
                            documentation="The topic to publish data to"),
                  ConfigKey("batch.size", "INT", 2000, importance="LOW",
                            documentation="The maximum number of records the source task can read from the file "
                                          "each time it is polled"))

    def start(self, props):
        self.props = dict(props)

    def validate(self, props):
        errors = {}
        if "," in props.get("topic", ""):
            errors["topic"] = ["'topic' in FileStreamSourceConnector configuration requires definition of a "
                               "single topic"]
        if not props.get("batch.size", "2000").strip().isdigit():
            errors["batch.size"] = [f"Invalid value {props['batch.size']} for configuration batch.size: "
                                    "Not a number of type INT"]
        return errors

    def task_class(self):
        return FileStreamSourceTask

    def task_configs(self, max_tasks):
        return [dict(self.props)]  # one file, one reader


class FileStreamSourceTask(SourceTask):
    def start(self, props):
        self.filename = props.get("file")
        if not self.filename:
            raise ConnectError("reading standard input is not supported here; set file")
        self.topic = props["topic"]
        self.batch_size = int(props.get("batch.size", 2000))
        self.stopping = threading.Event()
        self.lock = threading.Lock()  # stop() comes from another thread than poll()
        self.stream = None
        offset = self.context.offset_storage_reader.offset({"filename": self.filename})
        self.position = int(offset["position"]) if offset else 0

    def poll(self):
        with self.lock:
            records = None if self.stopping.is_set() else self._read_lines()
        if not records:
            self.stopping.wait(IDLE_WAIT_S)
        return records

    def _read_lines(self):
        if self.stream is None:
            try:
                self.stream = open(self.filename, "rb")
            except FileNotFoundError:
                return None
            self.stream.seek(self.position)
        records = []
        while len(records) < self.batch_size:
            line = self.stream.readline()
            if not line.endswith(b"\n"):  # no complete line yet: read it again next time
                self.stream.seek(self.position)
                break
            self.position += len(line)
            records.append(SourceRecord(
                topic=self.topic, kafka_partition=None, key_schema=None, key=None, value_schema=STRING_SCHEMA,
                value=line.rstrip(b"\r\n").decode("utf-8", "replace"),
                source_partition={"filename": self.filename}, source_offset={"position": self.position}))
        return records

    def stop(self):
        self.stopping.set()
        with self.lock:
            if self.stream is not None:
                self.stream.close()


class FileStreamSinkConnector(SinkConnector):
    CONFIG_DEF = (ConfigKey("file", documentation="Destination filename. If not specified, the standard output "
                                                  "will be used", importance="HIGH"),)

    def start(self, props):
        self.props = dict(props)

    def task_class(self):
        return FileStreamSinkTask

    def task_configs(self, max_tasks):
        return [dict(self.props) for _ in range(max_tasks)]


class FileStreamSinkTask(SinkTask):
    def start(self, props):
        if not props.get("file"):
            raise ConnectError("writing to standard output is not supported here; set file")
        self.stream = open(props["file"], "ab")

    def put(self, records):
        for record in records:
            self.stream.write(f"{record.value}\n".encode())

    def flush(self, current_offsets):
        self.stream.flush()
        os.fsync(self.stream.fileno())

    def stop(self):
        self.stream.close()
