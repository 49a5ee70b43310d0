#!/usr/bin/env python3
"""The memo next to Dynamic VRAM, run through a real ComfyUI's own model management (in-process, ComfyUI's python;
0.33 and newer: hosts without `ModelPatcherDynamic` print {"skipped": why}); prints one JSON line.

    $COMFYUI_PYTHON tests/comfy_dynamic_probe.py $COMFYUI_DIR <repo>

Dynamic VRAM itself needs an NVIDIA GPU (comfy-aimdo): here ComfyUI's real `load_models_gpu` / `free_memory` /
`ensure_pin_budget` run on a stand-in device (`cuda:0` as a label, no CUDA call: `get_free_memory` answers for it and
`soft_empty_cache` is a no-op) with stand-in patchers: `Dynamic` says is_dynamic() like ModelPatcherDynamic and
records what ComfyUI asks of it (VRAM unloads, pinned RAM evicted). Every free_memory call is recorded with its
for_dynamic, its host RAM demand and the load call it belongs to. Reports:
- `own_dynamic_load`: SDVG loads a dynamic MODEL (comfy_memory.load) while another dynamic model is loaded and the
  device is full: ComfyUI's calls (for_dynamic, pins), what the other model was asked, the memo registered;
- `own_full_load`: SDVG loads one of its own (non-dynamic) models, with the memo as it is and with the memo claiming
  1 PiB: the host RAM demand ComfyUI counts for the call (0.33: pins_required; the pip build 0.12: ram_required) in
  both, and whether pinned RAM of the dynamic model was evicted;
- `other_load`: a non-SDVG non-dynamic load needing memory: the memo's entries after (ComfyUI's walk still frees it).
"""
import json
import sys

import comfy_probe_env

COMFY, REPO = sys.argv[1], sys.argv[2]
comfy_probe_env.start(COMFY)
import torch  # noqa: E402

import comfy.model_management as mm  # noqa: E402
import comfy.model_patcher as mp  # noqa: E402

if not hasattr(mp, "ModelPatcherDynamic"):
    print(json.dumps({"skipped": "this host has no Dynamic VRAM (comfy.model_patcher.ModelPatcherDynamic)"}))
    sys.exit(0)

pack = comfy_probe_env.import_pack(REPO)
cm, shared_memo = pack.nodes.comfy_memory, pack.nodes.shared_memo
DEV = torch.device("cuda", 0)  # a label: nothing below touches CUDA
GIB = 2**30
state = {"free": 64 * GIB}
calls: list[dict] = []
loading: list[str] = []  # the patcher classes of the load_models_gpu call in progress
real_free_memory, real_load = mm.free_memory, mm.load_models_gpu


def free_memory(memory_required, device, *args, **kwargs):
    # host RAM demand a load call counts: 0.33's pins_required (non-dynamic models' sizes), the pip build's
    # ram_required (twice every model's size)
    calls.append({"for_dynamic": kwargs.get("for_dynamic", False), "loading": list(loading),
                  "ram_demand": kwargs.get("pins_required", kwargs.get("ram_required", 0))})
    return real_free_memory(memory_required, device, *args, **kwargs)


def load_models_gpu(models, *args, **kwargs):
    loading[:] = [type(m).__name__ for m in models]
    try:
        return real_load(models, *args, **kwargs)
    finally:
        loading.clear()


# the probe's own spies (in this process only): ComfyUI calls them by module name
mm.free_memory, mm.load_models_gpu = free_memory, load_models_gpu
mm.get_free_memory = lambda dev=None, torch_free_too=False: (state["free"], state["free"]) if torch_free_too else state["free"]
mm.soft_empty_cache = lambda *a, **k: None


class Dynamic(mp.ModelPatcher):
    """ModelPatcherDynamic as ComfyUI's model management sees it: dynamic, per-device pin state, partial unloads."""

    def __init__(self, size: int, name: str):
        super().__init__(torch.nn.Linear(2, 2), DEV, torch.device("cpu"), size=size)
        self.name, self.loaded, self.vram_asked, self.pins_evicted = name, 0, [], 0
        self.model.dynamic_pins = {DEV: {"active": False, "current_prompt": False}}

    def is_dynamic(self):
        return True

    def model_patches_to(self, device):
        return None

    def model_dtype(self):
        return torch.float32

    def loaded_size(self):
        return self.loaded

    def current_loaded_device(self):
        return DEV

    def partially_load(self, device_to, extra_memory=0, force_patch_weights=False):
        self.loaded = self.size
        return self.size

    def partially_unload(self, device_to, memory_to_free=0, force_patch_weights=False):
        self.vram_asked.append(memory_to_free)
        freed = min(self.loaded, int(memory_to_free))
        self.loaded -= freed
        return freed

    def detach(self, unpatch_all=True):
        self.loaded = 0 if unpatch_all else self.loaded
        return self.model

    def loaded_ram_size(self):
        return self.size

    def partially_unload_ram(self, ram_to_unload, subsets=None):
        self.pins_evicted += int(ram_to_unload)
        return int(ram_to_unload)

    def unregister_inactive_pins(self, ram_to_unload, subsets=None):
        return self.partially_unload_ram(ram_to_unload, subsets)


class Plain(Dynamic):
    """A model ComfyUI loads whole (a pack-loaded SDVG model, another pack's model)."""

    def is_dynamic(self):
        return False


memo = shared_memo.MEMO
patcher = cm.memo_patcher()
patcher.load_device = patcher.offload_device = DEV  # the memo lives on the (stand-in) GPU
cm._PATCHERS = {f"{id(memo)}|{mm.get_torch_device()}": patcher}
ENTRY = 64 * 2**20
memo.put(("kv", 0), torch.zeros(ENTRY // 4))
memo.pin("head", ("decoder", 0), torch.zeros(ENTRY // 4))
other = Dynamic(8 * GIB, "other workflow's dynamic model")
mm.load_models_gpu([other])
res = {"host_free_memory_params": list(__import__("inspect").signature(real_free_memory).parameters)}
del loading[:]

calls.clear()
state["free"] = GIB // 2  # the device is full
target = Dynamic(28 * GIB, "SDVG target (dynamic MODEL input)")
cm.load(target, memory_required=2 * GIB)
res["own_dynamic_load"] = {"calls": list(calls), "other_vram_asked": list(other.vram_asked),
                           "other_pins_evicted": other.pins_evicted, "memo_registered": cm.registered(),
                           "memo_bytes": shared_memo.memo_bytes(memo), "memo_held": memo.pinned_bytes}

# the same SDVG load with the memo as it is and with the memo claiming 1 PiB: the host RAM demand must not change
state["free"] = 64 * GIB
own = Plain(GIB, "SDVG's own model")
demand = []
real_memo_bytes = shared_memo.memo_bytes
for claimed in (None, 2**50):
    calls.clear()
    if claimed:
        shared_memo.memo_bytes = lambda m=memo, c=claimed: c if m is memo else real_memo_bytes(m)
    cm.load(own)
    demand.append([c["ram_demand"] for c in calls])
shared_memo.memo_bytes = real_memo_bytes
res["own_full_load"] = {"ram_demand": demand[0], "ram_demand_with_1PiB_memo": demand[1], "own_size": own.size,
                        "other_pins_evicted": other.pins_evicted}

calls.clear()
state["free"] = 0
mm.load_models_gpu([Plain(GIB, "another pack's model")], memory_required=4 * GIB)
res["other_load"] = {"calls": list(calls), "memo_bytes": shared_memo.memo_bytes(memo), "memo_registered": cm.registered()}
print(json.dumps(res))
