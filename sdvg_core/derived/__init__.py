"""Derived data and its bookkeeping: the bounded memo (memo.py) under typed keys (keys.py) that name every identity a
result depends on, the account of the work each operation computed or reused (tally.py), and content digests
(digest.py). Below the given pixels and the engine: it imports nothing else of sdvg_core."""
