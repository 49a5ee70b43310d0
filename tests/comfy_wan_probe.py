#!/usr/bin/env python3
"""Run the pack's CausalWan on ComfyUI's own WanModel (in-process, ComfyUI's python) and print JSON figures.

    $COMFYUI_PYTHON tests/comfy_wan_probe.py $COMFYUI_DIR <repo>

- fp32: CausalWan without a KV cache vs WanModel.forward on the same 3 latent frames (must agree to float error);
- bf16 weights with plain (non-casting) ComfyUI layers: the raw network fails on fp32 input to the fp32 patch
  embedding; through `comfy_wan_view` (nodes/comfy_model.py) it runs and stays close to fp32; same with manual-cast layers.
"""
import importlib
import json
import sys

import comfy_probe_env

COMFY, REPO = sys.argv[1], sys.argv[2]
comfy_probe_env.start(COMFY)
import torch  # noqa: E402

import comfy.ldm.wan.model as wanm  # noqa: E402
import comfy.ops  # noqa: E402

pack = comfy_probe_env.import_pack(REPO)
comfy_model = pack.nodes.comfy_model
wan = importlib.import_module("sdvg_pack.sdvg_core.models.wan")
schedule = importlib.import_module("sdvg_pack.sdvg_core.sampling.timesteps")


# Several heads (head_dim 32), so a head-ordering mismatch with ComfyUI's attention shows; text width as umT5's.
PROBE_SIZES = {"dim": 128, "ffn_dim": 256, "num_heads": 4, "num_layers": 2, "text_dim": 4096}


def make(dtype, ops):
    torch.manual_seed(0)
    net = wanm.WanModel(model_type="t2v", operations=ops, dtype=dtype, **PROBE_SIZES)
    with torch.no_grad():
        for _, p in net.named_parameters():
            p.copy_((torch.randn(p.shape) * 0.05).to(p.dtype))
    return net.eval()


def causal(net, dtype, x, ctx, view=True, kv=True):
    cfg = comfy_model.wan_config_from_module(net)
    dit = wan.CausalWan(comfy_model.comfy_wan_view(net, dtype) if view else net, cfg, dtype=dtype, device="cpu")
    assert cfg.num_heads == PROBE_SIZES["num_heads"], cfg  # the pack reads the head count off ComfyUI's model
    tpf = cfg.tokens_per_frame(x.shape[-2], x.shape[-1])
    cache = wan.KVCache.empty(cfg, batch=1, window_frames=x.shape[1], tokens_per_frame=tpf, device="cpu",
                              dtype=dtype) if kv else None
    return dit.forward(x, schedule.timestep_tensor(937.5, 1, 3), dit.encode_text(ctx), kv=cache).flow.float()


out = {}
torch.manual_seed(1)
x = torch.randn(1, 3, 16, 6, 8)  # [B, F, C, h, w]
ctx = torch.randn(1, 512, PROBE_SIZES["text_dim"]) * 0.3  # [B, text_len, text_dim]
with torch.inference_mode():
    net = make(torch.float32, comfy.ops.disable_weight_init)
    ours = causal(net, torch.float32, x, ctx, kv=False)
    theirs = net(x.permute(0, 2, 1, 3, 4), torch.tensor([937.5]), ctx).permute(0, 2, 1, 3, 4)
    out["fp32_vs_comfy_forward"] = float((ours - theirs).abs().max())
    out["scale"] = float(theirs.abs().max())
    ref = causal(net, torch.float32, x, ctx)
    for name, ops in (("bf16_plain", comfy.ops.disable_weight_init), ("bf16_manual_cast", comfy.ops.manual_cast)):
        net = make(torch.bfloat16, ops)
        out[name + "_view_vs_fp32"] = float((causal(net, torch.bfloat16, x, ctx) - ref).abs().max())
        try:
            causal(net, torch.bfloat16, x, ctx, view=False)
            out[name + "_raw"] = "ok"
        except RuntimeError as e:
            out[name + "_raw"] = "fails: " + str(e)[:80]
print(json.dumps(out))
