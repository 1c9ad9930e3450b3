"""The KRaft-style controller: a Raft core for the metadata log (raft.py) and the metadata
state machine that validates commands and replays records (state.py)."""
