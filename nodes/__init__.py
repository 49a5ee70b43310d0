"""ComfyUI node layer of SDVG (V3 API). Imported only relatively from the pack root: ComfyUI owns `nodes`."""
from __future__ import annotations

from comfy_api.latest import ComfyExtension, io

from .ar_sampler import SDVGARReport, SDVGSamplerARVideo
from .finish import SDVGFinish, SDVGShowVideo
from .folders import register_folders
from .generate import SDVGGenerate
from .live import SDVGLive
from .live_server import install as install_live_routes
from .loaders import SDVGLoadDrafter, SDVGLoadImageReward, SDVGLoadTarget
from .loop import SDVGLoopEnd, SDVGLoopStart
from .prompts import SDVGLoadPromptEmbeddings, SDVGSavePromptEmbeddings
from .prompt_schedule import SDVGPromptFromBlock, SDVGPromptSchedule
from .route_loader import SDVGLoadRouteDecoder
from .start import SDVGStart
from .steps import SDVGDecodeBlock, SDVGDraftBlock, SDVGRoute, SDVGScoreBlock

NODES: list[type[io.ComfyNode]] = [
    SDVGLoadDrafter, SDVGLoadTarget, SDVGLoadImageReward,
    SDVGStart, SDVGLoopStart, SDVGDraftBlock, SDVGDecodeBlock, SDVGScoreBlock, SDVGRoute, SDVGLoopEnd, SDVGFinish,
    SDVGGenerate, SDVGShowVideo, SDVGSavePromptEmbeddings, SDVGLoadPromptEmbeddings, SDVGPromptSchedule,
    SDVGPromptFromBlock, SDVGSamplerARVideo, SDVGARReport, SDVGLive, SDVGLoadRouteDecoder,
]

register_folders()
install_live_routes()  # SDVG Live's routes on ComfyUI's own server (none in a process without one)


class SDVGExtension(ComfyExtension):
    async def get_node_list(self) -> list[type[io.ComfyNode]]:
        return list(NODES)


async def comfy_entrypoint() -> SDVGExtension:
    return SDVGExtension()
