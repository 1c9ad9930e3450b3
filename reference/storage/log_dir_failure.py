"""LogDirFailureChannel, as Kafka's: where an I/O error on a log directory is reported.

A log directory that failed a write, an fsync or a rename is offline from then on: nothing
more is written there, and the partitions in it answer KAFKA_STORAGE_ERROR. Kafka takes such
a directory offline and tells the controller, which moves leadership to other replicas; when
every log directory of a broker has failed, the broker halts. A kspec node has one log
directory (log.dirs), which also holds its metadata log and raft state, so its first I/O
error stops the node: `on_failure` (set by the server) is called once with the directory and
the error, and the server stops the node with one line naming them.

Running out of file descriptors or memory (EMFILE, ENFILE, ENOMEM) says nothing about the
directory: that request fails with KAFKA_STORAGE_ERROR and the directory stays online (Kafka
takes it offline for any IOException; a process short of descriptors then loses every disk).
"""
from __future__ import annotations

import logging
import errno
from collections.abc import Callable

from reference.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kspec.storage")

RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})  # the process's limits, not the disk's


class LogDirFailureChannel:
    def __init__(self) -> None:
        self.offline_dirs: dict[str, str] = {}  # log dir -> the error that took it offline
        self.on_failure: Callable[[str, str], None] | None = None

    def fail(self, log_dir: str, error: OSError) -> KafkaError:
        """Take `log_dir` offline for `error`; the KAFKA_STORAGE_ERROR to answer with."""
        if error.errno in RESOURCE_ERRNOS:
            return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"log dir {log_dir}: {error}")
        if log_dir not in self.offline_dirs:
            self.offline_dirs[log_dir] = f"{type(error).__name__}: {error}"
            log.error("log dir %s is offline after an I/O error: %s", log_dir, self.offline_dirs[log_dir])
            if self.on_failure is not None:
                self.on_failure(log_dir, self.offline_dirs[log_dir])
        return self.storage_error(log_dir)

    def check_online(self, log_dir: str) -> None:
        if log_dir in self.offline_dirs:
            raise self.storage_error(log_dir)

    def storage_error(self, log_dir: str) -> KafkaError:
        return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"log dir {log_dir} is offline: {self.offline_dirs[log_dir]}")
