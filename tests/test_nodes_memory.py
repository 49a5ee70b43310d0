"""The pack as a guest of ComfyUI's memory, against the fake host's memory manager (the 0.33 rules): ComfyUI frees the
shared memo by its own logic (partially, wholly, Unload Models), whatever arguments each build passes; one model is
loaded per operation; a generation releases what it held outside the memo's budget; state outputs show the host's
RAM-pressure cache only the tensors they alone hold; importing the pack replaces nothing of the host."""
from __future__ import annotations

import pytest
import sys

import torch

from mini_executor import MiniExecutor
from node_env import REPO, SMALL, api_for, env, node_of  # noqa: F401 (env: the fake host's fixture)


def _memo_env(pack):
    import comfy.model_management as mm

    memo, cm = pack.nodes.shared_memo.MEMO, pack.nodes.comfy_memory
    memo.clear()
    mm.current_loaded_models.clear()
    return mm, memo, cm


def test_comfyui_frees_the_memo_by_its_own_logic(env):
    """Registered at SDVG's first model call; another model's load that needs part of the memory makes ComfyUI ask
    the memo to `partially_unload` (its least-recently-used entries go, the rest and the registration stay); one
    that needs everything `detach`es it (every entry goes); Unload Models does the same through unload_all_models."""
    pack, _ = env
    mm, memo, cm = _memo_env(pack)
    entry = 80 * 2**20  # bytes: big entries (the small tier takes <= 64 MB)
    for i in range(3):
        memo.put(("kv", i), torch.zeros(entry // 4))
    assert not cm.registered()  # nothing until an SDVG model call
    own = cm.managed(torch.nn.Linear(4, 4), torch.device("cpu"), torch.device("cpu"))
    cm.load(own)
    assert cm.registered() and cm.memo_patcher().loaded_size() == 3 * entry
    other = cm.managed(torch.nn.Linear(4, 4), torch.device("cpu"), torch.device("cpu"))  # another pack's model
    old = mm.FAKE_FREE_BYTES
    try:
        mm.FAKE_FREE_BYTES = 1 << 30
        mm.load_models_gpu([other], memory_required=(1 << 30) + entry // 2)  # half an entry missing: the oldest goes
        assert ("kv", 0) not in memo and ("kv", 1) in memo and ("kv", 2) in memo and cm.registered()
        cm.load(own)  # SDVG's own swap while the device is full: its caches stay
        mm.FAKE_FREE_BYTES = 0
        cm.load(own)
        assert memo.large.bytes == 2 * entry
        mm.load_models_gpu([other], memory_required=1 << 40)  # needs more than the memo holds: all of it goes
        assert memo.bytes == 0 and not cm.registered()
    finally:
        mm.FAKE_FREE_BYTES = old
    memo.pin("decoder_head", ("decoder", 0), torch.zeros(entry // 4))
    memo.put(("block", 0), torch.zeros(1 << 18))
    cm.load(own)
    mm.unload_all_models()  # the Unload Models button, /free
    assert memo.bytes == 0 and memo.pinned_bytes == 0 and not cm.registered()
    mm.current_loaded_models.clear()


def test_memo_patcher_takes_any_arguments_the_host_passes(env):
    """The pip build's partially_unload has `force_patch_weights`, upstream's not; detach(unpatch_all=False) is
    ComfyUI re-registering a model it is about to load again (nothing must be dropped then)."""
    pack, _ = env
    mm, memo, cm = _memo_env(pack)
    memo.put(("kv", 0), torch.zeros(20 * 2**20))
    p = cm.memo_patcher()
    assert p.partially_unload(torch.device("cpu"), 1, force_patch_weights=True) > 0 and memo.bytes == 0
    memo.put(("kv", 1), torch.zeros(20 * 2**20))
    p.detach(unpatch_all=False)
    assert memo.bytes > 0
    with cm.own_load():  # inside SDVG's own load nothing is dropped, whatever ComfyUI asks
        p.detach(True)
        assert p.partially_unload(torch.device("cpu"), 1) == 0
    assert memo.bytes > 0
    p.detach(True)
    assert memo.bytes == 0
    assert p.partially_load(torch.device("cpu"), 1e32, force_patch_weights=False) == 0


def test_one_model_loaded_per_operation_and_progress(env):
    pack, classes = env
    import comfy.model_management as mm
    import comfy.utils

    api = api_for(REPO / "workflows" / "sdvg_generate.json", classes, tau=-5.0, seed=7)
    mm.LOAD_CALLS.clear()
    comfy.utils.PROGRESS.clear()
    pack.nodes.shared_memo.MEMO.clear()
    MiniExecutor(classes).run(api)
    memo = pack.nodes.comfy_memory.memo_patcher()
    # never two models forced at once: each call loads one model, together with the memo its call reads
    assert mm.LOAD_CALLS and all(len(c) == 2 and c[1] is memo for c in mm.LOAD_CALLS)
    holders = {type(p.model.inner).__name__ if hasattr(p.model, "inner") else type(p.model).__name__
               for c in mm.LOAD_CALLS for p in c[:1]}
    assert holders >= {"WanDiT", "WanVAE", "ImageRewardModel"}
    previews = [p for p in comfy.utils.PROGRESS if p[2]]
    assert len(previews) == SMALL["num_blocks"]
    assert comfy.utils.PROGRESS[-1][0] == comfy.utils.PROGRESS[-1][1]


@pytest.mark.slow
def test_a_generation_releases_what_it_held(env):
    """What a generation holds outside the memo's budget (decoder cache head, newest pixels, text K/V) is released when
    it ends: after SDVG Generate, and after SDVG Finish in the step-by-step loop."""
    pack, classes = env
    memo = pack.nodes.shared_memo.MEMO
    for wf in ("sdvg_generate.json", "sdvg_loop_step_by_step.json"):
        memo.clear()
        api = api_for(REPO / "workflows" / wf, classes, tau=-5.0, seed=3, num_blocks=2)
        MiniExecutor(classes).run(api)
        assert memo.pinned_bytes == 0, wf
        assert memo.bytes > 0, wf  # the budgeted entries stay for a re-queue


def _storages(value, out: dict) -> dict:
    """{storage pointer: bytes} of the tensors inside a value (tensors, tuples/lists, dataclasses)."""
    import dataclasses

    if isinstance(value, torch.Tensor):
        out[value.untyped_storage().data_ptr()] = value.untyped_storage().nbytes()
    elif isinstance(value, (tuple, list)):
        for v in value:
            _storages(v, out)
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            _storages(getattr(value, f.name), out)
    return out


@pytest.mark.slow
def test_state_outputs_show_the_host_the_tensors_only_they_hold(env):
    """ComfyUI 0.33's RAM-pressure output cache sizes an output by the tensors in its lists/tuples (the real cache:
    test_comfy_host). After the step-by-step loop, every SDVG_STATE output shows it, beside its GenerationState,
    exactly its draft's decoded frames; whatever else its state holds outside the shared memo is the prompt's
    embeddings, which SDVG Start's state already held (shared by every state, not one output's)."""
    pack, classes = env
    from sdvg_pack.nodes.session import Run

    memo = pack.nodes.shared_memo.MEMO
    memo.clear()
    api = api_for(REPO / "workflows" / "sdvg_loop_step_by_step.json", classes, tau=-5.0, seed=9)
    ex = MiniExecutor(classes)
    ex.run(api)
    runs = {nid: v for nid, vals in ex.values.items() for v in (vals or ()) if isinstance(v, Run)}
    in_memo: dict = {}
    for tier in (memo.small, memo.large):
        for value, _ in tier._data.values():
            _storages(value, in_memo)
    prompt = _storages(runs[node_of(api, "SDVGStart")].state, {})
    drafts = 0
    for nid, run in runs.items():
        pending = run.state.pending
        frames = pending.frames if pending is not None else None
        assert run[0] is run.state and list(run[1:]) == ([] if frames is None else [frames]), nid
        drafts += frames is not None
        shown = _storages(tuple(run[1:]), {})
        outside = set(_storages(run.state, {})) - set(in_memo) - set(shown)
        assert outside <= set(prompt), (nid, outside)
    assert drafts == 2 * (SMALL["num_blocks"] - 1)  # Decode and Score of every drafted block


def test_importing_the_pack_replaces_nothing_of_the_host(env):
    """Every attribute of ComfyUI's memory manager, ModelPatcher module, utils and folder registry is the very same
    object after the pack's import (and after it ran workflows): the pack registers its memo, it patches nothing."""
    pack, _ = env
    for name, before in pack.host_before_import.items():
        now = vars(sys.modules[name])
        changed = sorted(k for k in before if now.get(k) is not before[k] and k != "__loader__")
        if name == "folder_paths":  # the pack adds its folders to the registry's dict (data, the same dict object)
            changed = [k for k in changed if callable(before[k])]
        assert changed == [], (name, changed)
        assert not any(callable(now[k]) and not k.startswith("__") for k in set(now) - set(before)), name
