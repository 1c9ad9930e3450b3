"""Kafka Connect: a worker with Connect's model, names and REST API (README.md)."""
