#!/usr/bin/env python3
"""The pack's CausalWan forward vs ComfyUI's own WanModel.forward, same process, same weights, same tokens.

    $COMFYUI_PYTHON tests/comfy_peer_probe.py $COMFYUI_DIR <repo> [--device cpu|cuda] [--layers 2] [--repeats 3]
                    [--compiled]

Real Wan 2.1 1.3B widths (dim 1536, FFN 8960, 12 heads, umT5 width 4096) with few layers; one 3-frame block with an
empty cache (no KV: the call ComfyUI's forward also makes). For fp32 and bf16: maximum difference of the predicted
flow, and the time ratio pack / ComfyUI (best of `repeats`, interleaved, after a warm-up of each). The pack runs as
the host runs it: ComfyUI's `optimized_attention` injected (nodes/attention.py comfy_attention), ComfyUI's layers
through nodes/comfy_model.py comfy_wan_view. Prints one JSON line.

`--compiled` adds, in the same interleaved rounds: the pack's whole-block compile
(CausalWan(compile=True): wan_block under torch.compile(fullgraph=True), inductor) and ComfyUI's WanModel compiled
the way its TorchCompileModel node does (comfy_api/torch_helpers/torch_compile.py set_torch_compile_wrapper:
torch.compile of the whole diffusion_model, backend inductor, its default options: fullgraph False, dynamic None);
each compiled variant's first call (its compile) is timed apart. Ratios: `{dtype}_compiled_vs_comfy` (pack
compiled / ComfyUI eager) and `{dtype}_compiled_vs_comfy_compiled` (pack compiled / ComfyUI compiled); below 1 the
pack is faster.
"""
import argparse
import importlib
import json
import time

import comfy_probe_env

ap = argparse.ArgumentParser()
ap.add_argument("comfy")
ap.add_argument("repo")
ap.add_argument("--device", default="cpu")
ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--repeats", type=int, default=3)
ap.add_argument("--latent", default="30x52", help="latent h x w of each frame (30x52 = 240x416 px, 1170 tokens)")
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--compiled", action="store_true", help="also both sides compiled with inductor")
ap.add_argument("--attention", choices=("host", "sdpa"), default="host",
                help="host: ComfyUI's optimized_attention injected, as nodes/attention.py routes it; sdpa: CausalWan's default")
a = ap.parse_args()

comfy_probe_env.start(a.comfy, cpu=a.device == "cpu")
import torch  # noqa: E402

import comfy.ldm.wan.model as wanm  # noqa: E402
import comfy.ops  # noqa: E402

pack = comfy_probe_env.import_pack(a.repo)
attention, comfy_model = pack.nodes.attention, pack.nodes.comfy_model
wan = importlib.import_module("sdvg_pack.sdvg_core.models.wan")
presets = importlib.import_module("sdvg_pack.sdvg_core.models.wan_config").PRESETS

if a.threads:
    torch.set_num_threads(a.threads)
dev = torch.device(a.device)
real = presets["wan2.1-t2v-1.3b"]
SIZES = {"dim": real.dim, "ffn_dim": real.ffn_dim, "num_heads": real.num_heads, "num_layers": a.layers,
         "text_dim": real.text_dim}
T_STEP = 937.5  # a Self-Forcing / Krea denoising timestep


def sync() -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def make(dtype):
    """ComfyUI's WanModel at the real widths with seeded random weights, as ComfyUI would load it (manual cast ops)."""
    torch.manual_seed(0)
    ops = comfy.ops.manual_cast if dtype != torch.float32 else comfy.ops.disable_weight_init
    net = wanm.WanModel(model_type="t2v", operations=ops, dtype=dtype, device=dev, **SIZES)
    with torch.no_grad():
        for _, p in net.named_parameters():
            p.copy_((torch.randn(p.shape, device=dev) / max(p[0].numel(), 1) ** 0.5 * 0.5).to(p.dtype)
                    if p.ndim > 1 else (torch.randn(p.shape, device=dev) * 0.05).to(p.dtype))
    return net.eval()


def best(fn, repeats):
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t0)
    return out, min(times)


h, w = (int(v) for v in a.latent.split("x"))
torch.manual_seed(1)
x = torch.randn(1, 3, 16, h, w, device=dev)  # [B, F, C, h, w]: one 3-frame block
ctx = torch.randn(1, 512, SIZES["text_dim"], device=dev) * 0.3  # [B, text_len, text_dim]
# an older pack (for before/after figures) has no injectable attention: its CausalWan uses SDPA
attn = attention.host_attention() if a.attention == "host" else None
extra = {"attention_fn": attn} if attn is not None else {}
out = {"device": a.device, "torch": torch.__version__, "layers": a.layers, "tokens": 3 * (h // 2) * (w // 2),
       "threads": torch.get_num_threads(), "attention": attn.__name__ if attn else "sdpa"}
with torch.inference_mode():
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        net = make(dtype)
        cfg = comfy_model.wan_config_from_module(net)
        view = comfy_model.comfy_wan_view(net, dtype)  # as host_comfy_model runs a ComfyUI MODEL
        dit = wan.CausalWan(view, cfg, dtype=dtype, device=dev, **extra)
        text = dit.encode_text(ctx)
        t = torch.full((1, 3), T_STEP)

        def ours():
            return dit.forward(x, t, text).flow.float()

        def theirs():
            return net(x.permute(0, 2, 1, 3, 4).to(dtype), torch.tensor([T_STEP], device=dev),
                       ctx.to(dtype)).permute(0, 2, 1, 3, 4).float()

        variants = {"pack": ours, "comfy": theirs}
        if a.compiled:
            compiled_runner = wan.CausalWan(view, cfg, dtype=dtype, device=dev, compile=True, **extra)
            compiled_text = compiled_runner.encode_text(ctx)
            comfy_compiled = torch.compile(net, backend="inductor", options=None, mode=None, fullgraph=False,
                                           dynamic=None)  # TorchCompileModel's torch.compile call

            def ours_compiled():
                return compiled_runner.forward(x, t, compiled_text).flow.float()

            def theirs_compiled():
                return comfy_compiled(x.permute(0, 2, 1, 3, 4).to(dtype), torch.tensor([T_STEP], device=dev),
                                      ctx.to(dtype)).permute(0, 2, 1, 3, 4).float()

            variants.update(pack_compiled=ours_compiled, comfy_compiled=theirs_compiled)
        for key, fn in variants.items():  # warm-up each (a compiled variant's first call compiles it)
            _, s = best(fn, 1)
            if key.endswith("compiled"):
                out[f"{name}_{key}_first_call_s"] = s
        times = {key: [] for key in variants}
        results = {}
        t_text = []
        keys = list(variants)
        for r in range(a.repeats):  # interleaved, the order rotated by one per round
            for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                results[key], s = best(variants[key], 1)
                times[key].append(s)
            _, s = best(lambda: dit.encode_text(ctx), 1)  # once per prompt in the pack; every call in ComfyUI's
            t_text.append(s)
        a_out, b_out = results["pack"], results["comfy"]
        out[f"{name}_max_diff"] = float((a_out - b_out).abs().max())
        out[f"{name}_scale"] = float(b_out.abs().max())
        out[f"{name}_pack_s"] = min(times["pack"])
        out[f"{name}_comfy_s"] = min(times["comfy"])
        out[f"{name}_time_ratio"] = min(times["pack"]) / min(times["comfy"])
        out[f"{name}_time_ratio_with_text"] = (min(times["pack"]) + min(t_text)) / min(times["comfy"])
        if a.compiled:
            for key in ("pack_compiled", "comfy_compiled"):
                out[f"{name}_{key}_s"] = min(times[key])
                out[f"{name}_{key}_max_diff_vs_comfy"] = float((results[key] - b_out).abs().max())
            out[f"{name}_compiled_vs_comfy"] = min(times["pack_compiled"]) / min(times["comfy"])
            out[f"{name}_compiled_vs_comfy_compiled"] = min(times["pack_compiled"]) / min(times["comfy_compiled"])
            out[f"{name}_compiled_vs_pack"] = min(times["pack_compiled"]) / min(times["pack"])
            out[f"{name}_seconds"] = times
            del compiled_runner, compiled_text, comfy_compiled
        del net, dit, text
print(json.dumps(out))
