"""The models of the executable specification, one module each: log, replication, group, idempotence."""
