#!/usr/bin/env python3
"""SDVG Sampler (AR video) on the host's GPU machinery (in-process, ComfyUI's python); prints one JSON line.
`./dev.sh gpu-check --comfyui DIR` runs it on CUDA (UNVERIFIED: never run on a GPU yet); the real-host suite runs it on
the CPU (no Dynamic VRAM, no compiler there: it checks the script and the CPU-side figures).

    $COMFYUI_PYTHON tests/comfy_ar_gpu_run.py $COMFYUI_DIR <repo> [--device cuda|cpu]

A Wan 2.1 T2V network at the real 1.3B widths with 2 layers and random weights, marked causal_ar, is loaded by core's
own loader twice (target and drafter; on NVIDIA 0.33+ under Dynamic VRAM). Then SamplerCustomAdvanced with core's
Sampler AR Video and with SDVG's sampler (target only; then sdvg with the drafter and a stand-in scorer): their
difference and wall times; the model compiler's switches (comfy.cli_args.args, where the host has them) as SDVG's
model calls saw them and after the sampling; the malloc graphs a model opened while SDVG sampled (where the host has
comfy.model_prefetch); core's noise rule on this device (sdvg_core ComfyARNoise against torch.manual_seed +
randn_like on the device, as core draws).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import comfy_probe_env

ap = argparse.ArgumentParser()
ap.add_argument("comfy")
ap.add_argument("repo")
ap.add_argument("--device", default="cpu")
a = ap.parse_args()
comfy_probe_env.start(a.comfy, cpu=a.device == "cpu")
import torch  # noqa: E402

SIGMAS = "1.0, 0.9375, 0.8333333, 0.625, 0.0"
SIZE = {"cuda": (320, 192), "cpu": (64, 48)}  # a small video on either (the run's point is the machinery)
SEED = 7


def main() -> dict:
    try:
        import comfy_extras.nodes_ar_video as ar
    except ImportError:
        return {"skipped": "this host has no core AR video nodes (ComfyUI 0.33+)"}
    import comfy.cli_args
    import comfy.model_management as mm
    import comfy.sd
    import comfy_extras.nodes_custom_sampler as cs
    from safetensors.torch import save_file

    pack = comfy_probe_env.import_pack(a.repo)
    from sdvg_pack.sdvg_core.demo.tiny import random_vae
    from sdvg_pack.sdvg_core.engine.noise import ComfyARNoise, comfy_ar_seed
    from sdvg_pack.sdvg_core.engine.state import GenerationSpec, PromptConditioning
    from sdvg_pack.sdvg_core.models.wan import CausalWan, build_random
    from sdvg_pack.sdvg_core.models.wan_config import PRESETS, WanDiTConfig

    real = PRESETS["wan2.1-t2v-1.3b"]
    cfg = WanDiTConfig(name="gpu-run-1.3b-2l", dim=real.dim, ffn_dim=real.ffn_dim, num_heads=real.num_heads,
                       num_layers=2, text_dim=real.text_dim)
    meta = {"config": json.dumps({"transformer": {"causal_ar": True}})}
    with tempfile.TemporaryDirectory() as tmp:
        models = []
        for seed in (0, 1):
            path = os.path.join(tmp, f"causal_{seed}.safetensors")
            save_file({k: v.to(torch.bfloat16).contiguous() for k, v in build_random(cfg, seed=seed).state_dict().items()},
                      path, metadata=meta)
            models.append(comfy.sd.load_diffusion_model(path))
    target, drafter = models
    vae = comfy.sd.VAE(sd={k: v.to(torch.bfloat16) for k, v in random_vae(3, preset="wan2.1-vae").state_dict().items()})
    emb = torch.randn(1, 512, cfg.text_dim, generator=torch.Generator().manual_seed(3)) * 0.3
    conditioning = [[emb, {}]]
    w, h = SIZE["cuda" if a.device == "cuda" else "cpu"]
    args = comfy.cli_args.args
    switches = ("disable_comfy_compiler", "disable_cuda_graphs")
    before = {s: getattr(args, s, None) for s in switches}
    seen, opened = [], []
    real_forward = CausalWan.forward

    def spy(self, *x, **k):  # what SDVG's model calls see (this script's own spy, its process only)
        seen.append(tuple(getattr(args, s, None) for s in switches))
        return real_forward(self, *x, **k)

    CausalWan.forward = spy
    try:
        import comfy.model_prefetch as prefetch

        real_begin = prefetch.malloc_graph_begin

        def begin(*x, **k):
            opened.append(bool(sampling["sdvg"]))
            return real_begin(*x, **k)

        prefetch.malloc_graph_begin = begin
    except (ImportError, AttributeError):
        prefetch = None
    sampling = {"sdvg": False}

    class ZeroScorer:
        key, info = "gpu-run-zero-scorer", "a stand-in scoring 0"

        def score_frames(self, frames, prompt):
            return torch.zeros(frames.shape[0])

    sigmas = cs.ManualSigmas.execute(SIGMAS).args[0]
    noise = cs.RandomNoise.execute(SEED).args[0]
    latent = ar.EmptyARVideoLatent.execute(w, h, 33, 1).args[0]  # 9 latent frames: 3 blocks of 3

    def sample(sampler):
        guider = cs.BasicGuider.execute(target, conditioning).args[0]
        t0 = time.perf_counter()
        out = cs.SamplerCustomAdvanced.execute(noise, guider, sampler, sigmas, latent).args[0]["samples"].float()
        if a.device == "cuda":
            torch.cuda.synchronize()
        return out, time.perf_counter() - t0

    def sdvg(**kw):
        opts = {"num_frame_per_block": 3, "vae": vae, "prompt": "a corgi", "policy": "target_only", "tau": -5.0,
                "cache_gb": 0.0, "filename_prefix": "sdvg_ar_gpu_run/SDVG_AR", **kw}
        return pack.nodes.ar_sampler.SDVGSamplerARVideo.execute(**opts).args[0]

    res: dict = {"device": a.device, "unverified": a.device == "cuda", "size": [w, h],
                 "patcher": [type(target).__name__, bool(target.is_dynamic()) if hasattr(target, "is_dynamic") else False],
                 "host_has_compiler": hasattr(args, switches[0]), "switches_before": before}
    with torch.inference_mode():
        core_out, res["core_seconds"] = sample(ar.SamplerARVideo.execute(3).args[0])
        sampling["sdvg"] = True
        ours, res["sdvg_target_only_seconds"] = sample(sdvg())
        _, res["sdvg_seconds"] = sample(sdvg(policy="sdvg", drafter=drafter, image_reward=ZeroScorer()))
        sampling["sdvg"] = False
    res["target_only_max_abs_diff"] = float((ours - core_out).abs().max())
    res["scale"] = float(core_out.abs().max())
    res["switches_seen_by_sdvg_calls"] = sorted({str(s) for s in seen})
    res["switches_after"] = {s: getattr(args, s, None) for s in switches}
    res["graphs_opened_while_sdvg_sampled"] = sum(opened) if prefetch is not None else None
    # core's noise rule on this device: what core draws (torch.manual_seed, then randn_like on the device)
    spec = GenerationSpec(PromptConditioning.make("x", torch.zeros(1, 4, 8)), w, h, 2, SEED)
    device = mm.get_torch_device()
    got = ComfyARNoise(num_renoise=3, device=str(device))(spec, 1).renoise[2]
    torch.manual_seed(comfy_ar_seed(SEED, 1, 2))
    want = torch.randn_like(torch.zeros(1, 16, 3, h // 8, w // 8, device=device)).permute(0, 2, 1, 3, 4)
    res["noise_device"] = str(device)
    res["noise_rule_max_abs_diff"] = float((got - want).abs().max())
    return res


if __name__ == "__main__":
    print(json.dumps(main()))
