"""Kafka's on-disk partition log: segments with offset and time indexes, recovery, retention,
DeleteRecords and idempotent producer state. Sans-IO decisions over a thin file layer; time
is passed in. The broker uses `Log` and `LogConfig`."""
from reference.storage.config import LogConfig
from reference.storage.log import AppendOrigin, Log, LogAppendInfo, LogReadInfo
from reference.storage.producer_state import ProducerStateManager

__all__ = ["AppendOrigin", "Log", "LogAppendInfo", "LogConfig", "LogReadInfo", "ProducerStateManager"]
