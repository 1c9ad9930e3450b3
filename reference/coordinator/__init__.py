"""Group coordination: consumer groups (classic and KIP-848) and their committed offsets.

Sans-IO cores: `coordinator.GroupCoordinator` is the entry point; `classic` and `consumer`
hold the two group protocols, `assignors` the server-side assignors, `records` the
`__consumer_offsets` record formats. reference/runtime/groups.py drives them, for the
handlers in reference/handlers/groups.py.
"""
