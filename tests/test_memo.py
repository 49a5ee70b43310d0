"""TieredMemo: big caches never evict the small results a re-run needs; same interface as Memo."""
from __future__ import annotations

import torch

from sdvg_core import Memo, TieredMemo


def test_big_entries_do_not_evict_small_ones():
    plain, tiered = Memo(1000), TieredMemo(1000, small_bytes=1000, small_entry_max=100)
    for m in (plain, tiered):
        for i in range(5):
            m.put(("draft", i), torch.zeros(10, dtype=torch.uint8))  # 10 bytes each
            m.put(("kv", i), torch.zeros(600, dtype=torch.uint8))  # one big cache fits at a time
    assert sum(plain.get(("draft", i)) is not None for i in range(5)) <= 2  # one LRU: the big ones pushed them out
    assert all(tiered.get(("draft", i)) is not None for i in range(5))
    assert tiered.get(("kv", 4)) is not None and tiered.get(("kv", 3)) is None
    assert tiered.bytes == 50 + 600 and len(tiered) == 6 and tiered.kinds() == {"draft": 5, "kv": 1}


def test_pin_resize_and_moving_between_tiers():
    m = TieredMemo(100, small_bytes=1000, small_entry_max=10)
    m.pin("head", ("cache", 1), torch.zeros(500, dtype=torch.uint8))  # bigger than the large budget: pinned only
    assert m.get(("cache", 1)) is not None and m.pinned_bytes == 500
    m.pin("head", ("cache", 2), torch.zeros(5, dtype=torch.uint8))  # the slot moves to the small tier
    assert m.get(("cache", 1)) is None and m.get(("cache", 2)) is not None and m.pinned_bytes == 5
    m.put("x", torch.zeros(50, dtype=torch.uint8))
    m.put("x", torch.zeros(2, dtype=torch.uint8))  # same key, now small: only one copy remains
    assert m.large.get("x") is None and m.small.get("x") is not None
    m.put("y", torch.zeros(60, dtype=torch.uint8))
    m.resize(10)
    assert m.get("y") is None and m.large.max_bytes == 10
    m.clear()
    assert len(m) == 0 and m.bytes == 0 and m.pinned_bytes == 0


def test_entries_without_tensors_are_bounded_by_count():
    """Scores weigh 0 tensor bytes: a long video's or a sweep's would grow without end; the entry count bounds them."""
    m = Memo(0, max_entries=100)
    for i in range(1000):
        m.put(("score", i), ((0.5,) * 12, {"scored_frames": 12}))
    assert len(m) == 100 and m.get(("score", 999)) is not None and m.get(("score", 0)) is None
