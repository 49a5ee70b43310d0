#!/usr/bin/env python3
"""An SDVG generation through the MODEL input inside a real ComfyUI's model management, with every load and free
recorded (in-process, ComfyUI's python); prints one JSON line. `./dev.sh gpu-check --comfyui DIR` runs it on CUDA,
where ComfyUI 0.33 loads the MODEL under Dynamic VRAM (ModelPatcherDynamic); the real-host suite runs it on the CPU
(no Dynamic VRAM there: it checks the script and the non-dynamic events).

    $COMFYUI_PYTHON tests/comfy_dynamic_vram_run.py $COMFYUI_DIR <repo> [--device cuda|cpu] [--blocks 3]

A Wan 2.1 T2V network with random weights (real 1.3B widths, 2 layers) is written to a temporary safetensors file and
loaded with ComfyUI's own `comfy.sd.load_diffusion_model` (as Load Diffusion Model does); it serves as drafter and
target (two loads: two patchers), the VAE is a tiny random one, ImageReward a stand-in scoring 0. Reports the patcher
classes (dynamic or not), each `load_models_gpu` call (models, dynamic flags) and each `free_memory` call
(for_dynamic, pins_required where the host has them), the memo's registration and bytes, and the decisions.
UNVERIFIED until run on a GPU: the figures of a CUDA run have not been seen yet.
"""
import argparse
import inspect
import json
import sys
import tempfile
from pathlib import Path

import comfy_probe_env

ap = argparse.ArgumentParser()
ap.add_argument("comfy")
ap.add_argument("repo")
ap.add_argument("--device", default="cpu")
ap.add_argument("--blocks", type=int, default=3)
a = ap.parse_args()
comfy_probe_env.start(a.comfy, cpu=a.device == "cpu")
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

import comfy.model_management as mm  # noqa: E402
import comfy.sd  # noqa: E402

pack = comfy_probe_env.import_pack(a.repo)
n = pack.nodes
core = __import__("sdvg_pack.sdvg_core", fromlist=["x"])
from sdvg_pack.sdvg_core.demo.tiny import random_vae  # noqa: E402
from sdvg_pack.sdvg_core.engine.config import EngineConfig  # noqa: E402
from sdvg_pack.sdvg_core.models.wan import build_random  # noqa: E402
from sdvg_pack.sdvg_core.models.wan_config import PRESETS, WanDiTConfig  # noqa: E402

events: list[dict] = []
real_free, real_load = mm.free_memory, mm.load_models_gpu
free_params = set(inspect.signature(real_free).parameters)


def free_memory(memory_required, device, *args, **kwargs):
    events.append({"free_memory": {"required_gib": float(memory_required) / 2**30, "device": str(device),
                                   **{k: kwargs[k] for k in ("for_dynamic", "pins_required") if k in kwargs}}})
    return real_free(memory_required, device, *args, **kwargs)


def load_models_gpu(models, *args, **kwargs):
    events.append({"load": [{"model": type(getattr(m, "model", m)).__name__, "patcher": type(m).__name__,
                             "dynamic": bool(getattr(m, "is_dynamic", lambda: False)())} for m in models]})
    return real_load(models, *args, **kwargs)


mm.free_memory, mm.load_models_gpu = free_memory, load_models_gpu  # this probe's own spies (its process only)

real = PRESETS["wan2.1-t2v-1.3b"]
cfg = WanDiTConfig(name="probe-1.3b-2l", dim=real.dim, ffn_dim=real.ffn_dim, num_heads=real.num_heads, num_layers=2,
                   text_dim=real.text_dim)
with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "wan_probe.safetensors"
    save_file({"model." + k: v.to(torch.bfloat16).contiguous() for k, v in build_random(cfg, seed=0).state_dict().items()},
              str(path))
    target_model = comfy.sd.load_diffusion_model(str(path))
    drafter_model = comfy.sd.load_diffusion_model(str(path))
target = n.comfy_model.host_comfy_model(target_model, "target")
drafter = n.comfy_model.host_comfy_model(drafter_model, "drafter")
vae = n.hosted.HostedVAE(random_vae(1), "probe-vae")


class ZeroScorer:
    key = "probe-zero-scorer"

    def score_frames(self, frames, prompt):
        return torch.zeros(frames.shape[0])


session = n.session.Session(target, drafter, vae, ZeroScorer(), EngineConfig())
spec = core.GenerationSpec(core.PromptConditioning.make("probe", torch.randn(1, 16, cfg.text_dim) * 0.3), 64, 48,
                           a.blocks, 0)
state = session.engine().generate(spec, core.ThresholdPolicy(tau=-1.0))
res = {"device": a.device, "dynamic_vram": [type(target_model).__name__, bool(target_model.is_dynamic())
                                             if hasattr(target_model, "is_dynamic") else False],
       "host_free_memory_params": sorted(free_params), "decisions": [b.decision for b in state.blocks],
       "memo_registered": n.comfy_memory.registered(), "memo_bytes": n.shared_memo.memo_bytes(),
       "events": events, "unverified": a.device == "cuda"}
print(json.dumps(res))
