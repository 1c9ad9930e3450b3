"""MirrorMaker 2-style mirroring between Kafka-compatible clusters (`kspec mirror`)."""
