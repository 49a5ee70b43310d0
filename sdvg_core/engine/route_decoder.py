"""The routing decoder: the decoder whose frames the scorer sees, a role like drafter and target.

By default the VAE routes (it decodes each draft, and an accepted draft's decode is the committed one). A run may
route on a decoder of its own instead (a tiny TAEHV: `Engine(..., route_vae=...)`): drafts are then decoded by it
from its own committed memory, which advances along the committed blocks only, and the video is still decoded by
the VAE (unless `EngineConfig.output_decoder` is "route": a fast preview). Scores of two decoders are not
comparable without a calibration (engine/calibration.py), so the decoder's identity is part of every draft-decode
and score key and its name is in the report (`route_decoder`).
"""
from __future__ import annotations

import torch

from ..derived.keys import ROUTE_ROLE
from ..models.taehv import TAEHVConfig
from .decoded import PixelStore

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


class Decoders:
    """A run's decoders and what each decodes: the VAE's store (the committed video and the pixels the recipes read
    back), the routing decoder's (the drafts the scorer sees: the VAE's own store unless a decoder of its own routes),
    and the store the output video is decoded by (the routing decoder's for a fast preview, `output_decoder` "route")."""

    def __init__(self, vae, route_vae, model_keys: dict, config, memoiser, interrupt, history_frames: int):
        routed_output = config.output_decoder == "route"
        if routed_output and route_vae is None:
            raise ValueError("output_decoder 'route' decodes the video with the routing decoder, but none was given: "
                             "pass route_vae (a tiny decoder), or leave output_decoder 'vae'")
        self.vae = PixelStore(vae, model_keys["vae"], config.decode_rule, memoiser, interrupt,
                              history_frames=history_frames, decode_on_commit=config.decode_committed and not routed_output)
        # a decoder of its own: its memory, its holds (never the VAE's), its work count
        self.route = self.vae if route_vae is None else PixelStore(
            route_vae, model_keys[ROUTE_ROLE], config.decode_rule, memoiser, interrupt,
            decode_on_commit=config.decode_committed and routed_output, role="route_", work_key="route_decode_frames",
            keeps_pixels=routed_output)
        self.output = self.route if routed_output else self.vae
        self.route_name, self.output_name = decoder_name(self.route.vae), decoder_name(self.output.vae)

    @property
    def draft_phase(self) -> str:
        """The phase a draft's decode is timed in: `decode` where the VAE routes, else `route_decode`."""
        return "decode" if self.route is self.vae else "route_decode"

    def commit(self, state, latents: torch.Tensor, lineage: str, draft, tally) -> torch.Tensor | None:
        """The committed block's decodes; its output pixels (None: not decoded now). Each decoder takes the accepted
        draft's decode when it made it (`draft`: its key, the routing decoder's), else decodes the block now when it
        decodes the output (and decode_committed is on); a routing decoder of its own decodes a block it did not draft
        when the next draft needs its memory after it."""
        routed = None
        if self.route is not self.vae:
            with tally.phase("route_decode"):
                routed = self.route.commit(state, latents, lineage, draft, tally)
            draft = None  # the VAE did not decode the draft
        with tally.phase("decode"):  # the accepted draft's decode, else decoded now (unless decode_committed is off)
            pixels = self.vae.commit(state, latents, lineage, draft, tally)
        return routed if self.output is not self.vae else pixels
