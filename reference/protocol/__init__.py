"""The Kafka wire protocol, sans-IO: framing, headers, the message codec driven by Kafka's JSON
message definitions, error codes, and RecordBatch v2 with its compression codecs."""
