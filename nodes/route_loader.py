"""SDVG Load Routing Decoder: a tiny decoder (TAEHV for Wan 2.1) for the `route_vae` input of SDVG Start / SDVG
Generate, from models/vae_approx or core's Load VAE (routing.py holds what the node hands on)."""
from __future__ import annotations

from comfy_api.latest import io, ui

from .folders import file_list
from .routing import (NO_FILE, ROUTE_FOLDER, ROUTE_SOURCE, RouteDecoder, SDVGRouteDecoder, from_comfy_vae,
                      from_file)
from .surface import CAT_LOADERS, SDVGError


class SDVGLoadRouteDecoder(io.ComfyNode):
    """A tiny decoder for routing, from models/vae_approx or core's Load VAE."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGLoadRouteDecoder", display_name="SDVG Load Routing Decoder", category=CAT_LOADERS,
            description="A tiny decoder (TAEHV for Wan 2.1) that decodes the drafts for ImageReward in place of the "
                        "full VAE. Connect it to SDVG Start's or SDVG Generate's 'route_vae'.",
            inputs=[io.Combo.Input("file", options=[NO_FILE, *file_list(ROUTE_FOLDER)], default=NO_FILE,
                                   tooltip="A file in models/vae_approx: taew2_1.safetensors / .pth (madebyollin/"
                                           "taehv: the DiT's normalised latents) or lighttaew2_1* (LightX2V: the "
                                           "VAE's raw latents; its name says which). Ignored when 'vae' is connected."),
                    io.Vae.Input("vae", optional=True,
                                 tooltip="Optional: core's Load VAE holding a tiny decoder (lighttaew2_1), instead of "
                                         "'file'."),
                    io.Boolean.Input("decode_output", default=False,
                                     tooltip="Also decode the video with the tiny decoder: a fast preview (the "
                                             "recipes' pixels, e.g. Krea's anchor frame, still come from the full "
                                             "VAE). Off: the video is the full VAE's.")],
            outputs=[SDVGRouteDecoder.Output(display_name="route_vae",
                                             tooltip="for the 'route_vae' input of SDVG Start / SDVG Generate"),
                     io.String.Output(display_name="info", tooltip="what was loaded")],
        )

    @classmethod
    def execute(cls, file: str = NO_FILE, vae=None, decode_output: bool = False) -> io.NodeOutput:
        if vae is not None:
            hosted = from_comfy_vae(vae)
        elif file and file != NO_FILE:
            hosted = from_file(file)
        else:
            raise SDVGError("SDVG Load Routing Decoder: pick a file of models/vae_approx (taew2_1 / lighttaew2_1 from "
                            f"{ROUTE_SOURCE}) or connect core's Load VAE with one")
        info = hosted.info + ("; decodes the video too (preview)" if decode_output else "")
        return io.NodeOutput(RouteDecoder(hosted, bool(decode_output)), info, ui=ui.PreviewText(info))
