"""ComfyUI node layer of SDVG (V3 API). Imported only relatively from the pack root: ComfyUI owns `nodes`."""
from __future__ import annotations

from comfy_api.latest import ComfyExtension, io

from . import host
from .generation import SDVGDecodeBlock, SDVGDraftBlock, SDVGFinish, SDVGGenerate, SDVGRoute, SDVGScoreBlock, SDVGStart
from .loaders import SDVGLoadDrafter, SDVGLoadImageReward, SDVGLoadTarget
from .loop import SDVGLoopEnd, SDVGLoopStart
from .prompts import SDVGLoadPromptEmbeddings, SDVGSavePromptEmbeddings

NODES: list[type[io.ComfyNode]] = [
    SDVGLoadDrafter, SDVGLoadTarget, SDVGLoadImageReward,
    SDVGStart, SDVGLoopStart, SDVGDraftBlock, SDVGDecodeBlock, SDVGScoreBlock, SDVGRoute, SDVGLoopEnd, SDVGFinish,
    SDVGGenerate, SDVGSavePromptEmbeddings, SDVGLoadPromptEmbeddings,
]

host.register_folders()


class SDVGExtension(ComfyExtension):
    async def get_node_list(self) -> list[type[io.ComfyNode]]:
        return list(NODES)


async def comfy_entrypoint() -> SDVGExtension:
    return SDVGExtension()
