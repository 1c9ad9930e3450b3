"""librdkafka's mock cluster as a second broker to test against.

The confluent-kafka wheel bundles librdkafka, whose mock cluster serves real TCP clients.
It is not a faithful Kafka (see shared research: acks ignored, no admin APIs, ControllerId 0
unless set), which is what makes it useful: the kit must report its gaps honestly.

`python -m conformance.mock_cluster --brokers 3` runs one in its own process and prints
`ready bootstrap=HOST:PORT,...`; `MockCluster` does that from Python and stops it.
`--as-shipped` leaves the mock's ControllerId at 0, as librdkafka ships it: that is the
target the conformance suite's published mock report describes.
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import os
import signal
import subprocess
import sys
import threading

READY_TIMEOUT_S = 30.0


def _librdkafka() -> ctypes.CDLL:
    import confluent_kafka

    libs = glob.glob(os.path.join(os.path.dirname(confluent_kafka.__file__), os.pardir,
                                  "confluent_kafka.libs", "librdkafka*.so*"))
    if not libs:
        raise RuntimeError("librdkafka shared library not found inside the confluent-kafka wheel")
    return ctypes.CDLL(libs[0])


def serve(broker_count: int, *, set_controller_id: bool = True) -> None:
    """Run a mock cluster in this process until SIGTERM/SIGINT (driven through librdkafka's C API)."""
    lib = _librdkafka()
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_size_t]
    errstr = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, len(errstr))  # errors only
    rk = lib.rd_kafka_new(0, conf, errstr, len(errstr))  # 0 = RD_KAFKA_PRODUCER
    if not rk:
        raise RuntimeError(f"rd_kafka_new failed: {errstr.value.decode()}")
    cluster = lib.rd_kafka_mock_cluster_new(rk, broker_count)
    if not cluster:
        raise RuntimeError("rd_kafka_mock_cluster_new failed")
    # Clients such as kafkajs send admin and InitProducerId requests to the controller, and the
    # mock reports ControllerId 0 (no such broker; its ids start at 1) unless told otherwise.
    if set_controller_id and hasattr(lib, "rd_kafka_mock_set_controller_id"):
        lib.rd_kafka_mock_set_controller_id.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        lib.rd_kafka_mock_set_controller_id(cluster, 1)
    print("ready bootstrap=" + lib.rd_kafka_mock_cluster_bootstraps(cluster).decode(), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()


class MockCluster:
    """A mock cluster in a child process; use as a context manager."""

    def __init__(self, broker_count: int = 3, *, as_shipped: bool = False) -> None:
        self.broker_count = broker_count
        self.as_shipped = as_shipped
        self.process: subprocess.Popen | None = None
        self.bootstrap = ""

    def __enter__(self) -> "MockCluster":
        self.process = subprocess.Popen(
            [sys.executable, "-m", "conformance.mock_cluster", "--brokers", str(self.broker_count)]
            + (["--as-shipped"] if self.as_shipped else []),
            stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        if "bootstrap=" not in line:
            self.__exit__()
            raise RuntimeError(f"mock cluster did not start: {line!r}")
        self.bootstrap = line.strip().split("bootstrap=", 1)[1]
        return self

    def __exit__(self, *exc) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=3, help="number of mock brokers (default 3)")
    parser.add_argument("--as-shipped", action="store_true",
                        help="leave ControllerId at the mock's 0 (not a broker id) instead of setting it to 1")
    args = parser.parse_args()
    serve(args.brokers, set_controller_id=not args.as_shipped)


if __name__ == "__main__":
    main()
