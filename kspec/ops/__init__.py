"""Operator commands, Kafka's everyday command-line verbs against any Kafka-compatible broker.

`kspec topics`, `kspec produce`, `kspec consume`, `kspec groups` and `kspec cluster status`,
built on confluent-kafka (librdkafka). Shared options, errors and exit codes: common.py;
the calls made around librdkafka's known faults (also used by mirror/ and faults/): rdkafka.py.
"""
