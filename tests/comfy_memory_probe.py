#!/usr/bin/env python3
"""The pack as a guest of a real ComfyUI's memory manager (in-process, ComfyUI's python); prints one JSON line.

    $COMFYUI_PYTHON tests/comfy_memory_probe.py $COMFYUI_DIR <repo>

- `changed_by_import`: attributes of comfy.model_management / comfy.model_patcher / comfy.utils / folder_paths that
  are not the same object after importing the pack (must be none; folder_paths' registry dict gains the pack's
  folders, which is data);
- the shared memo registered by SDVG's first model load (in `current_loaded_models`), partly evicted by ComfyUI's
  own `free_memory` when it needs less than the memo holds (the oldest entry goes, the registration stays), kept
  through SDVG's own loads, emptied and unregistered by `unload_all_models` (Unload Models, /free);
- `changed_after_use`: the same comparison after all that (nothing patched at run time either).
"""
import importlib
import json
import sys

import comfy_probe_env

COMFY, REPO = sys.argv[1], sys.argv[2]
comfy_probe_env.start(COMFY)
import torch  # noqa: E402

HOST = ("comfy.model_management", "comfy.model_patcher", "comfy.utils", "folder_paths")
mods = {n: importlib.import_module(n) for n in HOST}
before = {n: dict(vars(m)) for n, m in mods.items()}


def changed() -> list[str]:
    out = []
    for n, m in mods.items():
        now = vars(m)
        for k, v in before[n].items():
            if now.get(k) is not v and not (n == "folder_paths" and not callable(v)):
                out.append(f"{n}.{k}")
    return sorted(out)


pack = comfy_probe_env.import_pack(REPO)
importlib.import_module("sdvg_pack.nodes")
res = {"changed_by_import": changed()}

mm = mods["comfy.model_management"]
cm = importlib.import_module("sdvg_pack.nodes.comfy_memory")
memo = importlib.import_module("sdvg_pack.nodes.shared_memo").MEMO
cpu = torch.device("cpu")
ENTRY = 256 * 2**20  # bytes per cached entry: well above the free-memory noise of a shared machine
memo.resize(8 * ENTRY)
for i in range(3):
    memo.put(("kv", i), torch.ones(ENTRY // 4))
res["registered_before_use"] = cm.registered()
own = cm.managed(torch.nn.Linear(4, 4), mm.get_torch_device(), mm.unet_offload_device())
cm.load(own)
res["registered_after_load"] = cm.registered()
res["loaded_size_gib"] = cm.memo_patcher().loaded_size() / 2**30
# ComfyUI needs half an entry more than the device has free: its free_memory walks the loaded models
mm.free_memory(mm.get_free_memory(cpu) + ENTRY // 2, cpu)
res["after_partial"] = {"entries": [i for i in range(3) if ("kv", i) in memo], "registered": cm.registered()}
cm.load(own)  # SDVG's own swap: nothing dropped
res["after_own_load"] = {"entries": [i for i in range(3) if ("kv", i) in memo], "registered": cm.registered()}
mm.unload_all_models()
res["after_unload_all"] = {"bytes": memo.bytes + memo.pinned_bytes, "registered": cm.registered()}
res["changed_after_use"] = changed()
print(json.dumps(res))
