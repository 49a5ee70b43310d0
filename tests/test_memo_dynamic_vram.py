"""The shared memo next to ComfyUI 0.33's Dynamic VRAM, on the fake memory manager (which frees the 0.33 way: a call
frees "for dynamic" only when every model in it is dynamic, and counts each non-dynamic model's size as pinned-RAM
demand). The same rules against 0.33.0's own model management: tests/comfy_dynamic_probe.py (real-host suite)."""
from __future__ import annotations

import sys

import pytest
import torch


@pytest.fixture()
def host(tmp_path):
    import fake_host

    with fake_host.installed(tmp_path) as pack:
        mm = sys.modules["comfy.model_management"]
        pack.nodes.shared_memo.MEMO.clear()
        mm.current_loaded_models.clear()
        mm.FREE_CALLS.clear()
        try:
            yield pack, mm
        finally:
            mm.FAKE_FREE_BYTES = 1 << 40
            pack.nodes.shared_memo.MEMO.clear()
            mm.current_loaded_models.clear()


def _dynamic(pack, mm, size: int):
    """A ModelPatcherDynamic stand-in: its weights stream in on demand (is_dynamic)."""
    import comfy.model_patcher

    class Dynamic(comfy.model_patcher.ModelPatcher):
        unloads: list = []

        def is_dynamic(self) -> bool:
            return True

        def partially_unload(self, device_to, memory_to_free=0, *a, **k) -> int:
            self.unloads.append(memory_to_free)
            return 0

    return Dynamic(torch.nn.Linear(2, 2), mm.get_torch_device(), mm.unet_offload_device(), size=size)


ENTRY = 8 * 2**20  # bytes of one memo entry here


def test_memo_is_never_pinned_ram_demand(host):
    """A load call with the memo in it counts only the SDVG model's bytes as pins (the memo pins nothing)."""
    pack, mm = host
    cm, memo = pack.nodes.comfy_memory, pack.nodes.shared_memo.MEMO
    memo.put(("kv", 0), torch.zeros(ENTRY // 4))
    model = cm.managed(torch.nn.Linear(64, 64), mm.get_torch_device(), mm.unet_offload_device())
    cm.load(model)
    assert cm.registered() and memo.bytes == ENTRY
    pins = [c[3] for c in mm.FREE_CALLS]
    assert pins == [model.model_size()], (pins, model.model_size(), ENTRY)
    assert cm.memo_patcher().model_size() == ENTRY  # outside its own load call ComfyUI sees every byte


def test_a_dynamic_model_keeps_comfys_dynamic_free_path(host):
    """SDVG loading a dynamic MODEL: that call frees for dynamic (other dynamic models stream, not unloaded), nothing
    counted as pins; the memo is registered in a call of its own, which pins nothing either."""
    pack, mm = host
    cm, memo = pack.nodes.comfy_memory, pack.nodes.shared_memo.MEMO
    other = _dynamic(pack, mm, 1 << 30)  # another workflow's dynamic model, loaded
    mm.load_models_gpu([other])
    memo.put(("kv", 0), torch.zeros(ENTRY // 4))
    mm.FREE_CALLS.clear()
    mm.FAKE_FREE_BYTES = 1 << 20  # the device is full
    target = _dynamic(pack, mm, 1 << 29)
    cm.load(target, memory_required=1 << 20)
    assert mm.FREE_CALLS[0][2] is True and mm.FREE_CALLS[0][3] == 0, mm.FREE_CALLS  # the model's own call
    assert all(c[3] == 0 for c in mm.FREE_CALLS), mm.FREE_CALLS  # the memo's registration call pins nothing
    assert other.unloads == []  # left to stream on demand
    assert cm.registered() and memo.bytes == ENTRY


def test_memo_yields_its_budget_to_a_dynamic_load_but_keeps_the_runs_held_entries(host):
    """In SDVG's own dynamic load ComfyUI may ask the registered memo for memory: the reusable budget goes, what the
    running generation holds stays; the memo is registered again after."""
    pack, mm = host
    cm, memo = pack.nodes.comfy_memory, pack.nodes.shared_memo.MEMO
    cm.load(cm.managed(torch.nn.Linear(2, 2), mm.get_torch_device(), mm.unet_offload_device()))
    memo.pin("head", ("decoder", 0), torch.zeros(ENTRY // 4))
    mm.FAKE_FREE_BYTES = 0
    # ComfyUI asks the memo for more than its budget and less than all it holds (partially_unload), then for all
    for more in (False, True):
        memo.put(("kv", more), torch.zeros(ENTRY // 4))
        held = pack.nodes.shared_memo.memo_bytes(memo)  # budgeted entries (the held one too) + the held one
        cm.load(_dynamic(pack, mm, 0), memory_required=(1 << 30) if more else held - ENTRY // 2)
        assert memo.bytes == 0 and memo.pinned_bytes == ENTRY, more
        assert cm.registered()


def test_another_load_still_reclaims_the_memo(host):
    """Outside SDVG's own loads ComfyUI's walk reaches the memo as before (the Dynamic VRAM rules changed nothing
    there)."""
    pack, mm = host
    cm, memo = pack.nodes.comfy_memory, pack.nodes.shared_memo.MEMO
    memo.put(("kv", 0), torch.zeros(ENTRY // 4))
    memo.pin("head", ("decoder", 0), torch.zeros(ENTRY // 4))
    cm.load(_dynamic(pack, mm, 1 << 29))
    mm.FAKE_FREE_BYTES = 0
    mm.load_models_gpu([cm.managed(torch.nn.Linear(2, 2), mm.get_torch_device(), mm.unet_offload_device())],
                       memory_required=1 << 40)
    assert memo.bytes == 0 and memo.pinned_bytes == 0
