"""The KV cache's own API (models/kv_cache.py): sink, ring eviction, append, rewrite, evict, attention reads,
stale-view detection and forks on a branch switch. No model: keys/values are filled with their frame's index."""
from __future__ import annotations

import pytest
import torch

from sdvg_core.models.kv_cache import KVCache, KVCopyStats, KVWrite, StaleKVError
from sdvg_core import WanDiTConfig

CFG = WanDiTConfig(name="kv-test", dim=8, ffn_dim=8, num_heads=2, num_layers=2, text_dim=4)  # head_dim 4
TPF = 2  # tokens per latent frame


def _empty(window: int, sink: int = 0, rope: str = "baked", copies: KVCopyStats | None = None) -> KVCache:
    return KVCache.empty(CFG, batch=1, window_frames=window, tokens_per_frame=TPF, device="cpu", dtype=torch.float32,
                         sink_frames=sink, rope=rope, copies=copies)


def _kv_of(frames: list[int], layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys/values [1, heads, tokens, head_dim] whose every entry encodes (frame, layer): k = f + layer/10, v = -k."""
    k = torch.cat([torch.full((1, CFG.num_heads, TPF, CFG.head_dim), f + layer / 10) for f in frames], dim=2)
    return k, -k


def _call(kv: KVCache | KVWrite, frames: list[int], commit: bool = True, fail_at_layer: int | None = None):
    """What a forward does with a cache: open the write, write each layer, read what it attends to, maybe commit.
    Returns (the committed view or None, the frames the last layer attended to, in physical order, the handle)."""
    plan = kv if isinstance(kv, KVWrite) else kv.append(len(frames), frames[0])
    w = plan.open()
    for i in range(CFG.num_layers):
        if i == fail_at_layer:
            raise KeyboardInterrupt
        w.write(i, *_kv_of(frames, i))
    seen = w.keys(CFG.num_layers - 1)[0, 0, ::TPF, 0]
    return (w.commit() if commit else None), [round(float(x - 0.1 * (CFG.num_layers - 1))) for x in seen], w


def _logical(view: KVCache) -> list[int]:
    """Frame encoded in each logical slot's keys (layer 0), read through the view's logical accessor."""
    return [round(float(x)) for x in view.keys(0)[0, 0, ::TPF, 0]]


def test_append_fills_sink_then_window_and_evicts_the_oldest_window_block_once_full():
    kv = _empty(window=6, sink=2)
    views, logical = [], []
    for b in range(5):  # blocks of 2 frames: 0-1 (sink), 2-3, 4-5, then evictions
        kv, seen, w = _call(kv, [2 * b, 2 * b + 1])
        views.append(kv)
        logical.append(_logical(kv))  # read while current (a later block reuses the evicted slots in place)
        assert sorted(seen) == sorted(kv.frame_ids)  # a call attends to sink + window + itself (physical order)
        assert w.key_tokens == kv.length  # the attended keys are a prefix of the buffer: no copy
    assert views[0].frame_ids == (0, 1) and views[0].sink_len == 2 and views[0].ring_len == 0
    assert views[2].frame_ids == (0, 1, 2, 3, 4, 5)
    assert views[3].frame_ids == (0, 1, 4, 5, 6, 7)  # 2, 3 evicted: the oldest window block, never the sink
    assert views[4].frame_ids == (0, 1, 6, 7, 8, 9)
    assert logical[3] == [0, 1, 4, 5, 6, 7]  # logical order although the ring wrapped (6, 7 in 2, 3's slots)
    assert views[3].physical_slots() == (0, 1, 4, 5, 2, 3)
    assert logical[4] == [0, 1, 6, 7, 8, 9]
    assert views[4].buffer is views[0].buffer


def test_eviction_is_not_block_aligned_when_the_window_is_not():
    kv = _empty(window=5, sink=1)
    for b in range(4):
        kv, _, _ = _call(kv, [2 * b, 2 * b + 1])
    assert kv.frame_ids == (0, 4, 5, 6, 7)  # e = L + n - W frames, here 1 then 2


def test_every_call_of_a_block_evicts_the_same_frames_and_leaves_the_view_usable():
    kv = _empty(window=4, sink=1)
    for b in range(2):
        kv, _, _ = _call(kv, [2 * b, 2 * b + 1])
    base = kv  # frames 0 (sink) | 1, 2, 3: full, so the next block evicts 1 and 2
    targets = []
    for _ in range(3):  # three denoising steps of the next block: scratch
        _, seen, w = _call(base, [4, 5], commit=False)
        targets.append(w.runs)
        assert base.valid_for(2)
    assert len({tuple(t) for t in targets}) == 1
    committed, seen, _ = _call(base, [4, 5])
    assert committed.frame_ids == base.append(2, 4).snapshot()[2]


def test_rewrite_keeps_the_sink_or_replaces_it():
    kv = _empty(window=6, sink=2)
    for b in range(4):
        kv, _, _ = _call(kv, [2 * b, 2 * b + 1])
    assert kv.frame_ids == (0, 1, 4, 5, 6, 7)
    # recache of the newest 6 generated frames (2..7) keeping the sink: frames 2, 3 only query, 4..7 rewritten
    plan = kv.rewrite(6, 2, keep_sink=True)
    w = plan.open()
    assert w.skip == 2
    for i in range(CFG.num_layers):
        k, v = _kv_of([2, 3, 4, 5, 6, 7], i)
        w.write(i, k + 100, v - 100)  # "the new prompt's" keys
    kept = w.commit()
    assert kept.frame_ids == (0, 1, 4, 5, 6, 7)
    assert _logical(kept) == [0, 1, 104, 105, 106, 107]  # sink untouched, the window recomputed in place
    # without keeping it, the first recached frames become the sink
    plan = kept.rewrite(6, 2, keep_sink=False)
    w = plan.open()
    assert w.skip == 0
    for i in range(CFG.num_layers):
        k, v = _kv_of([2, 3, 4, 5, 6, 7], i)
        w.write(i, k + 200, v)
    local = w.commit()
    assert local.frame_ids == (2, 3, 4, 5, 6, 7) and _logical(local) == [202, 203, 204, 205, 206, 207]
    assert not kv.valid  # the recache rewrote in place: the pre-switch view is stale


def test_evict_is_logical_and_never_touches_the_sink():
    kv = _empty(window=6, sink=2)
    for b in range(3):
        kv, _, _ = _call(kv, [2 * b, 2 * b + 1])
    shorter = kv.evict(2)
    assert shorter.frame_ids == (0, 1, 4, 5) and _logical(shorter) == [0, 1, 4, 5]
    assert kv.valid and _logical(kv) == [0, 1, 2, 3, 4, 5]  # nothing moved
    with pytest.raises(ValueError, match="evict"):
        kv.evict(5)
    # appending fewer frames than were evicted leaves a partial window: the call still attends exactly to it
    grown, seen, w = _call(shorter, [6])
    assert grown.frame_ids == (0, 1, 4, 5, 6) and sorted(seen) == [0, 1, 4, 5, 6] and _logical(grown) == [0, 1, 4, 5, 6]


def test_a_view_whose_slots_were_overwritten_is_stale_and_never_read():
    kv = _empty(window=4)
    views = []
    for b in range(4):
        kv, _, _ = _call(kv, [2 * b, 2 * b + 1])
        views.append(kv)
    old = views[1]  # frames 0-3; block 2 went into block 0's slots, block 3 into block 1's
    assert not old.valid and not old.valid_for(2)
    with pytest.raises(StaleKVError, match="overwritten"):
        old.keys(0)
    with pytest.raises(StaleKVError):
        _call(old, [4, 5])  # a forward from it refuses before reading anything
    assert views[3].valid and _logical(views[3]) == [4, 5, 6, 7]
    # views[2] (frames 2-5): block 3 overwrote only frames 2-3, the slots a next block would evict: still usable
    assert not views[2].valid and views[2].valid_for(2)


def test_branch_switch_forks_once_and_keeps_the_other_branch():
    copies = KVCopyStats()
    kv = _empty(window=8, copies=copies)
    parent, _, _ = _call(kv, [0, 1])
    child_a, _, _ = _call(parent, [2, 3])
    assert copies.forks == 0
    _call(parent, [20, 21], commit=False)  # another branch drafts from the parent: fork (copies frames 0-1)
    _call(parent, [20, 21], commit=False)  # its next step reuses the fork
    child_b, _, _ = _call(parent, [20, 21])  # and commits in it
    assert copies.forks == 1
    assert copies.fork_bytes == 2 * TPF * CFG.num_layers * 2 * CFG.num_heads * CFG.head_dim * 4
    assert child_b.buffer is not child_a.buffer
    assert _logical(child_a) == [0, 1, 2, 3] and _logical(child_b) == [0, 1, 20, 21] and parent.valid


def test_a_linear_run_never_copies_and_attends_in_place():
    copies = KVCopyStats()
    kv = _empty(window=6, sink=2, copies=copies)
    for b in range(50):
        for _ in range(3):
            _, _, w = _call(kv, [2 * b, 2 * b + 1], commit=False)
            assert w.keys(0).data_ptr() == kv.buffer.k[0].data_ptr()
        kv, _, _ = _call(kv, [2 * b, 2 * b + 1])
    assert copies.forks == 0 and kv.frame_ids == (0, 1, 96, 97, 98, 99)


def test_an_interrupted_write_commits_nothing_and_invalidates_what_it_touched():
    kv = _empty(window=4)
    for b in range(2):
        kv, _, _ = _call(kv, [2 * b, 2 * b + 1])
    before = kv.buffer.frontier
    with pytest.raises(KeyboardInterrupt):
        _call(kv, [4, 5], fail_at_layer=1)
    assert kv.buffer.frontier == before
    assert kv.valid_for(2) and not kv.valid  # frames 0-1 (the slots it was writing) are no longer trusted
    again, _, _ = _call(kv, [4, 5])
    assert _logical(again) == [2, 3, 4, 5]


def test_slot_rope_positions_are_logical_slot_indices():
    kv = _empty(window=6, sink=2, rope="slot")
    for b in range(3):
        kv, _, _ = _call(kv, [2 * b, 2 * b + 1])
    w = kv.append(2, 6).open()  # 2, 3 evicted, 6, 7 go into their slots
    p = w.plan
    phys = KVCache(kv.buffer, p.sink_len, p.ring_start, p.ring_len, p.frame_ids).physical_slots()
    assert [w.key_positions[p] for p in phys] == list(range(6))  # each physical slot rotated by its logical index
    assert w.query_positions == (4, 5)
    assert w.key_positions != tuple(range(6))  # the ring wrapped: physical order is not logical


def test_bad_layouts_and_calls_are_refused():
    with pytest.raises(ValueError, match="sink"):
        _empty(window=3, sink=3)
    with pytest.raises(ValueError, match="RoPE mode"):
        _empty(window=3, rope="relative")
    kv = _empty(window=4, sink=2)
    with pytest.raises(ValueError, match="does not fit"):
        kv.append(3, 0)
    kv, _, _ = _call(kv, [0, 1])
    with pytest.raises(ValueError, match="rewrite"):
        kv.rewrite(3, 0)
