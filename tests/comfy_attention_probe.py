#!/usr/bin/env python3
"""Every attention backend a real ComfyUI can select, against SDVG's routing table (in-process, ComfyUI's python);
prints one JSON line.

    $COMFYUI_PYTHON tests/comfy_attention_probe.py $COMFYUI_DIR <repo>

- `backends`: each `attention_*` function of comfy/ldm/modules/attention.py (what a launch flag can make
  `optimized_attention`) and each name in its registry (what Model Attention Backend can put on a MODEL): SDVG's
  decision for it (nodes/attention.py ROUTED / DECLINED; "unlisted" fails the test) and, where it runs on this
  machine's CPU, its maximum deviation from PyTorch SDPA on q [1, 4, 300, 128], k/v [1, 4, 420, 128] in float32
  (else why it does not run);
- `override`: a MODEL carrying its own choice (ModelPatcher.set_model_optimized_attention, 0.33) is routed through
  it: the deviation of the pack's call through that MODEL's options from the chosen function called directly.
"""
import inspect
import json
import sys

import comfy_probe_env

COMFY, REPO = sys.argv[1], sys.argv[2]
comfy_probe_env.start(COMFY)
import torch  # noqa: E402

import comfy.ldm.modules.attention as ca  # noqa: E402
import comfy.model_patcher  # noqa: E402

pack = comfy_probe_env.import_pack(REPO)
routing = pack.nodes.attention
torch.manual_seed(0)
HEADS, D = 4, 128  # Wan's head_dim
q, k, v = torch.randn(1, HEADS, 300, D), torch.randn(1, HEADS, 420, D), torch.randn(1, HEADS, 420, D)
ref = torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(1, 300, HEADS * D)

functions = {n: f for n, f in vars(ca).items() if n.startswith("attention") and inspect.isfunction(f)
             and "heads" in inspect.signature(f).parameters}
registry = dict(getattr(ca, "REGISTERED_ATTENTION_FUNCTIONS", {}))
# a dedicated kernel whose package is missing falls back to PyTorch inside ComfyUI: its "deviation" would be SDPA's
AVAILABLE = {"attention_sage": "SAGE_ATTENTION_IS_AVAILABLE", "attention3_sage": "SAGE_ATTENTION3_IS_AVAILABLE",
             "attention_flash": "FLASH_ATTENTION_IS_AVAILABLE", "attention_xformers": "XFORMERS_IS_AVAILABLE",
             "attention_comfy_kitchen_int8": "COMFY_KITCHEN_INT8_ATTENTION_IS_AVAILABLE"}
out = {"chosen": routing.chosen_backend(), "backends": {}, "registry": {}}
for name, fn in functions.items():
    decision = "routed" if name in routing.ROUTED else "declined" if name in routing.DECLINED else "unlisted"
    entry = {"decision": decision}
    if name in AVAILABLE and not getattr(ca, AVAILABLE[name], False):
        entry["runs_on_cpu"] = f"no: {AVAILABLE[name]} is false here (its package or CUDA kernel is missing)"
        out["backends"][name] = entry
        continue
    try:
        got = fn(q, k, v, HEADS, skip_reshape=True)
        entry["max_dev_vs_sdpa"] = float((got.float() - ref).abs().max())
    except Exception as e:  # noqa: BLE001 (a kernel that needs CUDA or a package: say why)
        entry["runs_on_cpu"] = f"no: {type(e).__name__}: {str(e)[:160]}"
    out["backends"][name] = entry
for name, fn in registry.items():
    out["registry"][name] = getattr(fn, "__name__", "?")
# a MODEL with its own choice: the pack's call goes through the override (0.33: Model Attention Backend)
patcher = comfy.model_patcher.ModelPatcher(torch.nn.Linear(1, 1), torch.device("cpu"), torch.device("cpu"))
if hasattr(patcher, "set_model_optimized_attention"):
    calls = []

    def chosen(q_, k_, v_, heads, **kw):
        calls.append(heads)
        return ca.attention_basic(q_, k_, v_, heads, **kw)

    patcher.set_model_optimized_attention(chosen)
    fn = routing.host_attention(patcher)
    got = fn(q, k, v)
    out["override"] = {"routed": fn is not None, "calls": len(calls),
                       "max_dev_vs_chosen": float((got - ca.attention_basic(q, k, v, HEADS, skip_reshape=True)).abs().max())}
print(json.dumps(out))
