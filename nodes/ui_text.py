"""Text shown on the node that is running (progress text), where the frontend supports it."""
from __future__ import annotations

import logging

LOG = logging.getLogger("SDVG")


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
