"""The routing decoder: the decoder whose frames the scorer sees, a role like drafter and target.

By default the VAE routes (it decodes each draft, and an accepted draft's decode is the committed one). A run may
route on a decoder of its own instead (a tiny TAEHV: `Engine(..., route_vae=...)`): drafts are then decoded by it
from its own committed memory, which advances along the committed blocks only, and the video is still decoded by
the VAE (unless `EngineConfig.output_decoder` is "route": a fast preview). Scores of two decoders are not
comparable without a calibration (engine/calibration.py), so the decoder's identity is part of every draft-decode
and score key and its name is in the report (`route_decoder`).
"""
from __future__ import annotations

from ..models.taehv import TAEHVConfig

WAN_VAE = "wan_vae"  # the report's name of the full Wan 2.1 VAE (the default routing and output decoder)


def decoder_name(decoder: object) -> str:
    """`taehv:<name>` for a TAEHV (its config's name: taew2_1, lighttaew2_1, ...), else `wan_vae`."""
    config = getattr(decoder, "config", None)
    if isinstance(config, TAEHVConfig):
        return f"taehv:{config.name}"
    return WAN_VAE


def check_route_vae(route_vae: object, vae: object, latent_channels: int) -> None:
    """Refuse a routing decoder that cannot stand in for the VAE: its latent channels, its pixels per latent and its
    frames per latent frame must be the VAE's (the scorer sees a draft's frames as the output would have them)."""
    rc, vc = getattr(route_vae, "config", None), getattr(vae, "config", None)
    if rc is None or not hasattr(route_vae, "decode_stream"):
        raise ValueError(f"the routing decoder ({type(route_vae).__name__}) is not a streaming decoder: give a TAEHV "
                         f"(io.checkpoint.load_taehv) or the VAE itself")
    z = getattr(rc, "z_dim", latent_channels)
    if z != latent_channels:
        raise ValueError(f"the routing decoder takes {z}-channel latents, the DiTs make {latent_channels}: use a "
                         f"tiny decoder for Wan 2.1 (taew2_1 / lighttaew2_1)")
    for what in ("spatial_compression", "temporal_compression"):
        mine, theirs = getattr(rc, what, None), getattr(vc, what, None)
        if mine is not None and theirs is not None and mine != theirs:
            raise ValueError(f"the routing decoder's {what.replace('_', ' ')} is {mine}, the VAE's {theirs}: its "
                             f"frames would not be the output's frames")
