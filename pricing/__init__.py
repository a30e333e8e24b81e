"""The cost engine: pure functions over price documents and usage.

No database, no I/O except reading the bundled sheets on request. `ledger` and
`workers` import this package; it imports neither.
"""
