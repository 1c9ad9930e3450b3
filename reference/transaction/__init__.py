"""Transactions (KIP-98, KIP-360, KIP-447, KIP-890): the transaction coordinator over
`__transaction_state` (coordinator.py, records.py) and the per-partition side: open
transactions, the last stable offset and the aborted-transaction index (partition.py).
Sans-IO; reference/runtime/transactions.py is the shell."""
