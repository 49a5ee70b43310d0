"""--route-vae and --output-decoder: the routing decoder of a command-line run (the demo, the calibration, sdvg_eval).

`--route-vae FILE` scores the drafts on a tiny decoder's frames (taew2_1.pth / .safetensors, lighttaew2_1*; the video
is still decoded by the VAE); in the tiny default the word `tiny` names the embedded tiny random TAEHV. `--output-decoder
route` decodes the video with it too (a fast preview). engine/route_decoder.py says what routing on it means.
"""
from __future__ import annotations

import argparse

import torch

from ..engine.config import OUTPUT_DECODERS
from ..io.checkpoint import load_taehv
from ..io.model_files import vae_dtype_for
from .tiny_taehv import tiny_taehv

TINY_ROUTE = "tiny"  # --route-vae tiny: the embedded tiny TAEHV (tiny default only)
TINY_ROUTE_SEED = 7  # its weights' seed (any; fixed so runs repeat)


def add_route_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--route-vae", metavar="FILE", default=None,
                   help="a tiny decoder to score the drafts with (taew2_1.pth / .safetensors from madebyollin/taehv, or "
                        "LightX2V's lighttaew2_1*); the video is still decoded by --vae. Its scores are on another "
                        "scale than the VAE's: calibrate tau first (python -m sdvg_core.demo.calibrate). "
                        f"'{TINY_ROUTE}' in the tiny default: the embedded tiny random TAEHV")
    p.add_argument("--output-decoder", choices=list(OUTPUT_DECODERS), default=OUTPUT_DECODERS[0],
                   help="vae: the video is decoded by the VAE (default); route: by --route-vae (a fast preview; "
                        "Krea's anchor frames still come from the VAE)")


def route_problems(a: argparse.Namespace, real: bool) -> list[str]:
    """What is wrong with the routing flags, before anything loads (the file itself is checked with the others)."""
    problems = []
    if a.output_decoder == "route" and not a.route_vae:
        problems.append("--output-decoder route decodes the video with the routing decoder: give --route-vae FILE")
    if real and a.route_vae == TINY_ROUTE:
        problems.append(f"--route-vae {TINY_ROUTE} names the tiny default's embedded decoder; with real models give a "
                        f"taew2_1 / lighttaew2_1 file")
    return problems


def route_file(a: argparse.Namespace) -> str | None:
    """The --route-vae file to check before loading (None: none given, or the embedded tiny decoder)."""
    return None if a.route_vae in (None, TINY_ROUTE) else a.route_vae


def load_route_vae(a: argparse.Namespace, device: str | torch.device):
    """The routing decoder of --route-vae (None without it), in the VAE's dtype for the device."""
    if not a.route_vae:
        return None
    if a.route_vae == TINY_ROUTE:
        return tiny_taehv(TINY_ROUTE_SEED, device=device)
    return load_taehv(a.route_vae, device=device, dtype=vae_dtype_for(device))
