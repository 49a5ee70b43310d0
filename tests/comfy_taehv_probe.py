#!/usr/bin/env python3
"""The routing decoder against ComfyUI's own TAEHV (ComfyUI's python; hosts without comfy/taesd/taehv.py print
{"skipped": why}); prints one JSON line.

    $COMFYUI_PYTHON tests/comfy_taehv_probe.py $COMFYUI_DIR <repo> <a taew2_1-layout .safetensors>

The file is read by ComfyUI as core's Load VAE reads it (comfy.sd.VAE: a TAEHV for 16-channel latents, no latent
format for fp32 weights); the pack takes the VAE through `routing.from_comfy_vae` into the core's TAEHV. Both
decode the same latents (ComfyUI's port the raw ones, the core's the DiT's normalised ones, as the engine hands them):
ComfyUI's unclamped RGB clamped to 0..1, the core's [-1, 1] mapped to 0..1.
"""
import json
import os
import sys

import comfy_probe_env

COMFY, REPO, FILE = sys.argv[1], sys.argv[2], sys.argv[3]
comfy_probe_env.start(COMFY)
if not os.path.isfile(os.path.join(COMFY, "comfy", "taesd", "taehv.py")):
    print(json.dumps({"skipped": "this host has no TAEHV (comfy/taesd/taehv.py): its Load VAE cannot load one"}))
    sys.exit(0)
import torch  # noqa: E402

import comfy.sd  # noqa: E402
import comfy.utils  # noqa: E402

pack = comfy_probe_env.import_pack(REPO)
vae = comfy.sd.VAE(sd=comfy.utils.load_torch_file(FILE))
hosted = pack.nodes.routing.from_comfy_vae(vae)
z = torch.randn(1, 16, 3, 6, 8, generator=torch.Generator().manual_seed(0))  # raw latents [B, C, T, h, w]
with torch.no_grad():
    theirs = vae.first_stage_model.decode(z.to(vae.vae_dtype)).float().clamp(0, 1)  # [B, 3, T', H, W]
# the engine hands a routing decoder the DiT's normalised latents (the sampler's raw LATENT through Wan 2.1's latent
# format); a decoder of raw latents maps them back first
mean = torch.tensor(pack.sdvg_core.models.vae.WAN21_LATENT_MEAN).view(1, -1, 1, 1, 1)
std = torch.tensor(pack.sdvg_core.models.vae.WAN21_LATENT_STD).view(1, -1, 1, 1, 1)
ours, _ = hosted.decode_stream((z - mean) / std, None)
ours = (ours.float() + 1) / 2
print(json.dumps({"comfy_class": type(vae.first_stage_model).__name__, "latent_format": str(
    getattr(vae.first_stage_model, "latent_format", None)), "key": hosted.key, "shape": list(ours.shape),
    "comfy_shape": list(theirs.shape), "max_abs_diff": float((ours - theirs).abs().max())}))
