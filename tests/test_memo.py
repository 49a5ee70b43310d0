"""TieredMemo: big caches never evict the small results a re-run needs; same interface as Memo."""
from __future__ import annotations

import torch

from sdvg_core import Memo, TieredMemo
from sdvg_core.derived.memo import Hold


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


def test_evict_drops_least_recently_used_bytes_and_keeps_the_budget():
    """A host asking for memory back (ComfyUI's partially_unload): LRU entries worth at least the bytes asked for, the
    big tier first, the budget unchanged, held entries kept."""
    m = TieredMemo(1000, small_bytes=1000, small_entry_max=10)
    for i in range(3):
        m.put(("kv", i), torch.zeros(100, dtype=torch.uint8))
        m.put(("draft", i), torch.zeros(10, dtype=torch.uint8))
    m.pin("head", ("decoder", 0), torch.zeros(300, dtype=torch.uint8))  # held (and in the big tier's LRU)
    m.get(("kv", 0))  # now the most recently used cache
    assert m.evict(150) == 200  # whole entries: ("kv", 1), then ("kv", 2)
    assert ("kv", 0) in m and ("kv", 1) not in m and ("kv", 2) not in m and m.large.max_bytes == 1000
    assert m.evict(10_000) == 400 + 30  # the rest of the big tier, then the small one
    assert m.bytes == 0 and m.pinned_bytes == 300 and m.get(("decoder", 0)) is not None
    assert Memo(50).evict(10) == 0


def test_entries_without_tensors_are_bounded_by_count():
    """Scores weigh 0 tensor bytes: a long video's or a sweep's would grow without end; the entry count bounds them."""
    m = Memo(0, max_entries=100)
    for i in range(1000):
        m.put(("score", i), ((0.5,) * 12, {"scored_frames": 12}))
    assert len(m) == 100 and m.get(("score", 999)) is not None and m.get(("score", 0)) is None


# ---------------------------------------------------------------------------------------------------------------
# memo.Memoiser, the one owner of entries: credit-once, run-id stamps, the KV chain's rules; tally.Account's +
# ---------------------------------------------------------------------------------------------------------------
def _forwards(n: int):
    """A computation of `n` target forwards (what it charges to the part of the tally it is given)."""
    def compute(part):
        part.add("target_forwards", n)
        return f"{n} forwards"
    return compute


def test_a_reused_entry_is_credited_once_per_operation():
    from sdvg_core.derived.memo import Memoiser
    from sdvg_core.derived.tally import Tally

    memoiser = Memoiser(Memo(1 << 20))
    first = Tally(run_id="a")
    assert memoiser.memoised("k", "block", first, _forwards(2)) == "2 forwards"
    assert (first.work["target_forwards"], first.cost["target_forwards"], first.reused) == (2, 2, [])
    again = Tally(run_id="a")
    for _ in range(2):  # the same operation looks it up twice: computed 0, costs 2 in a fresh run, reused twice
        assert memoiser.memoised("k", "block", again, _forwards(99)) == "2 forwards"
    assert (again.work["target_forwards"], again.cost["target_forwards"]) == (0, 2)
    assert again.reused == ["block", "block"] and again.carried == []  # the same execution computed it
    later = Tally(run_id="b")
    memoiser.memoised("k", "block", later, _forwards(99))
    assert later.cost["target_forwards"] == 2 and later.carried == ["block"]  # another operation, another run


def test_a_result_the_operation_computed_is_not_credited_again():
    from sdvg_core.derived.memo import Memoiser
    from sdvg_core.derived.tally import Tally

    memoiser, op = Memoiser(Memo(1 << 20)), Tally(run_id="a")
    memoiser.memoised("k", "block", op, _forwards(3))
    memoiser.memoised("k", "block", op, _forwards(3))
    assert (op.work["target_forwards"], op.cost["target_forwards"], op.reused) == (3, 3, ["block"])


class _Link:
    """A stand-in KV view for Memoiser.extend: usable unless marked stale."""

    nbytes = 1

    def __init__(self, name: str, stale: bool = False):
        self.name, self.stale = name, stale


def _extend(memoiser, tally, b: int):
    def step(k, link, part):
        part.add("target_context_forwards", 1)
        return _Link(f"{link.name}+{k}")
    return memoiser.extend(lambda j: ("kv", j), b, "target_kv", tally, usable=lambda link: not link.stale,
                        start=lambda part: _Link("empty"), step=step, hold=Hold("kv:target", lru=False),
                        snapshot=lambda link: _Link(link.name))


def test_the_kv_chain_credits_what_a_fresh_run_would_have_had():
    """extend: a reused link b is credited; links rebuilt up to a lost (overwritten) link count as work only, and the
    lost link's own cost is credited to the block it served."""
    from sdvg_core.derived.memo import Memoiser
    from sdvg_core.derived.tally import Tally

    memoiser = Memoiser(Memo(1 << 20))
    made = Tally(run_id="a")
    assert _extend(memoiser, made, 3).name == "empty+0+1+2"  # links 1..3 built from link 0
    assert made.work["target_context_forwards"] == made.cost["target_context_forwards"] == 3
    memoiser.memo.release_run()
    reused = Tally(run_id="a")
    assert _extend(memoiser, reused, 3).name == "empty+0+1+2"  # link 3's snapshot reused: its cost (1) credited
    assert (reused.work["target_context_forwards"], reused.cost["target_context_forwards"]) == (0, 1)
    assert reused.reused == ["target_kv"]
    memoiser.memo.release_run()
    for j in (2, 3):  # a later block of their branch overwrote links 2 and 3 in place
        memoiser.memo.get(("kv", j)).value.stale = True
    rebuilt = Tally(run_id="a")
    assert _extend(memoiser, rebuilt, 3).name == "empty+0+1+2"  # from link 1: blocks 1 and 2 committed again
    assert rebuilt.work["target_context_forwards"] == 2  # both computed now ...
    assert rebuilt.cost["target_context_forwards"] == 1  # ... but a fresh run had link 3 (lost): its cost only
    assert rebuilt.reused == []


def test_accounts_add_every_field():
    from sdvg_core.derived.tally import Account

    a = Account({"target_forwards": 1}, {"target_forwards": 2}, {"target": 0.5}, ("pixels",), ("pixels",))
    b = Account({"target_forwards": 3, "vae_decode_frames": 3}, {"target_forwards": 4}, {"target": 0.25, "decode": 1.0},
                ("target", "score"), ("score",))
    s = a + b
    assert dict(s.work) == {"target_forwards": 4, "vae_decode_frames": 3} and dict(s.cost) == {"target_forwards": 6}
    assert dict(s.seconds) == {"target": 0.75, "decode": 1.0}
    assert s.reused == ("pixels", "target", "score") and s.carried == ("pixels", "score")
    assert a + Account() == a == Account() + a


def test_a_rerun_on_one_engine_is_all_reuse_and_says_so():
    """Generating the same video again on one engine computes nothing and every record names what an earlier
    execution made (not a fresh run's time); its fresh-run cost is the first run's."""
    from sdvg_core import Engine, GenerationSpec, PromptConditioning, TargetOnly, build_report, tiny_models
    from sdvg_core.io.text import demo_embeddings

    m = tiny_models(seed=0)
    spec = GenerationSpec(PromptConditioning.make("a fox", demo_embeddings("a fox", 32)), 48, 32, 3, 1)
    engine = Engine(m.target, m.vae)
    first, again = engine.generate(spec, TargetOnly()), engine.generate(spec, TargetOnly())
    assert all(r.work["target_forwards"] == 0 and "target" in r.carried for r in again.blocks)
    assert [r.cost for r in again.blocks] == [r.cost for r in first.blocks]
    report = build_report(again, "", engine.recipe, engine.recipe.plan.num_steps, run_id=again.blocks[0].run_id)
    assert not report.fresh_run
