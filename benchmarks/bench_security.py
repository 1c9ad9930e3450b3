"""What TLS and SASL cost: confluent-kafka produce and consume throughput through the PLAINTEXT,
SSL and SASL_SSL (PLAIN) listeners of one `kspec broker` (no authorizer), and the time to open an
authenticated connection on each (TCP, TLS handshake, SaslHandshake and SaslAuthenticate).

Prints the median of several repetitions in MB/s (100-byte records, acks=1, linger.ms=5) and the
median connection set-up time in ms; a shared 2-core machine is noisy, so the ratios to
PLAINTEXT matter more than the rates.

    python benchmarks/bench_security.py [--mb 32] [--repeats 3]
"""
from __future__ import annotations

import argparse
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402

from kspec.ops.pki import make_pki  # noqa: E402
from reference.process import BrokerProcess  # noqa: E402
from reference.security.jaas import PLAIN_LOGIN_MODULE  # noqa: E402
from conformance.sasl import authenticate  # noqa: E402
from conformance.wire import WireClient  # noqa: E402

RECORD_BYTES = 100
CONNECTIONS = 20  # connection set-ups timed per listener


def client_config(listener: str, address: str, ca_path: str) -> dict:
    config = {"bootstrap.servers": address, "log_level": 0}
    if listener == "SSL":
        config.update({"security.protocol": "SSL", "ssl.ca.location": ca_path})
    if listener == "SASL_SSL":
        config.update({"security.protocol": "SASL_SSL", "ssl.ca.location": ca_path, "sasl.mechanism": "PLAIN",
                       "sasl.username": "bench", "sasl.password": "bench-secret"})
    return config


def produce_mb_s(config: dict, topic: str, megabytes: int) -> float:
    producer = Producer({**config, "linger.ms": 5, "batch.size": 1_000_000, "acks": 1})
    value = b"x" * RECORD_BYTES
    count = megabytes * 1_000_000 // RECORD_BYTES
    started = time.monotonic()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(600)
    return megabytes / (time.monotonic() - started)


def consume_mb_s(config: dict, topic: str, megabytes: int) -> float:
    consumer = Consumer({**config, "group.id": f"bench-{time.monotonic_ns()}", "enable.auto.commit": False,
                         "fetch.queue.backoff.ms": 10})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    wanted = megabytes * 1_000_000 // RECORD_BYTES
    seen, started = 0, None
    while seen < wanted:
        messages = consumer.consume(10_000, 1.0)
        if messages and started is None:
            started = time.monotonic()
        seen += len(messages)
    consumer.close()
    return megabytes / (time.monotonic() - started)


def connect_ms(listener: str, address: str, context: ssl.SSLContext) -> float:
    started = time.monotonic()
    client = WireClient(address, ssl_context=context if listener != "PLAINTEXT" else None)
    if listener == "SASL_SSL":
        authenticate(client, "PLAIN", "bench", "bench-secret")
    else:
        client.request(18, 3, {"client_software_name": "bench", "client_software_version": "1"})  # ApiVersions
    elapsed = (time.monotonic() - started) * 1000
    client.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        pki = make_pki(f"{directory}/pki")
        broker = BrokerProcess(f"{directory}/data",
                               listen="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                               overrides={"ssl.keystore.location": pki.server_pem_path,
                                          "sasl.enabled.mechanisms": "PLAIN",
                                          "listener.name.sasl_ssl.plain.sasl.jaas.config":
                                              f'{PLAIN_LOGIN_MODULE} required user_bench="bench-secret";'})
        with broker:
            context = ssl.create_default_context(cafile=pki.ca_path)
            baseline = {}
            print(f"{'listener':<10} {'produce MB/s':>13} {'consume MB/s':>13} {'connect ms':>11}")
            for listener in ("PLAINTEXT", "SSL", "SASL_SSL"):
                address = broker.listeners[listener]
                config = client_config(listener, address, pki.ca_path)
                produced, consumed = [], []
                for repeat in range(args.repeats):
                    topic = f"bench-{listener.lower()}-{repeat}"
                    produced.append(produce_mb_s(config, topic, args.mb))
                    consumed.append(consume_mb_s(config, topic, args.mb))
                connect = statistics.median(connect_ms(listener, address, context) for _ in range(CONNECTIONS))
                row = (statistics.median(produced), statistics.median(consumed), connect)
                baseline.setdefault("row", row)
                ratios = " ".join(f"{value / base:.2f}" for value, base in zip(row[:2], baseline["row"][:2]))
                print(f"{listener:<10} {row[0]:>13.1f} {row[1]:>13.1f} {row[2]:>11.1f}   (ratio to PLAINTEXT: {ratios})",
                      flush=True)


if __name__ == "__main__":
    main()
