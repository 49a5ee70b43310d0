"""What the user meets of the pack in ComfyUI besides its nodes: the socket types and menu categories, the errors it
reads (what is wrong and how to fix it) and the text drawn on the node that is running."""
from __future__ import annotations

import logging

from comfy_api.latest import io

LOG = logging.getLogger("SDVG")

# Socket types, created once: sockets connect only to the same io_type string
SDVGModel = io.Custom("SDVG_MODEL")  # a hosted Wan DiT (drafter or target): hosted.DiTHandle
SDVGReward = io.Custom("SDVG_REWARD")  # a hosted ImageReward scorer: hosted.HostedScorer
SDVGState = io.Custom("SDVG_STATE")  # run.Run: session + immutable GenerationState
SDVGLoop = io.Custom("SDVG_LOOP")  # the loop-start -> loop-end link
SDVGSchedule = io.Custom("SDVG_SCHEDULE")  # sdvg_core's PromptSchedule of PromptConditioning: prompts by first block

CATEGORY = "SDVG"
CAT_LOADERS = "SDVG/loaders"
CAT_STEPS = "SDVG/steps"
CAT_LOOP = "SDVG/loop"
CAT_PROMPTS = "SDVG/prompts"


class SDVGError(RuntimeError):
    """A user-facing error: what is wrong and how to fix it."""


def sentence(cause: object) -> str:
    """An error's text as a sentence that ends with exactly one period (causes often end with their own)."""
    text = str(cause).rstrip()
    return text if text.endswith((".", "!", "?")) else text + "."


def show_text(text: str) -> None:
    """Draw `text` on the node running now (frontends >= 1.2x show progress text on the node; for the loop's
    expanded copies the text goes to the node the user placed, whose id ends the copy's id). No-op elsewhere."""
    try:
        from comfy_execution.utils import get_executing_context
        from server import PromptServer
    except ImportError:
        return
    ctx = get_executing_context()
    server = getattr(PromptServer, "instance", None)
    if ctx is None or server is None or not hasattr(server, "send_progress_text"):
        return
    try:
        server.send_progress_text(text, str(ctx.node_id).rsplit(".", 1)[-1])
    except Exception as e:  # display only: never fail a generation over it
        LOG.debug("SDVG: progress text not sent: %s", e)
