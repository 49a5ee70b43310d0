"""Fake of ComfyUI's `server` module: PromptServer.instance with send_progress_text (text drawn on a node, newer
frontends), recording (node id, text); send_sync (websocket events), recording (event, data) and calling the hooks a
test adds (on the sender's thread, as a page's answer would arrive between two blocks); and `routes`, the route table
packs add their routes to (aiohttp's, as the host's)."""
from __future__ import annotations

TEXTS: list[tuple[str, str]] = []
EVENTS: list[tuple[str, dict]] = []
HOOKS: list = []  # callables (event, data): a test's stand-in for a page that answers events


class PromptServer:
    instance = None

    def __init__(self):
        try:
            from aiohttp import web

            self.routes = web.RouteTableDef()
        except ImportError:  # the pack's live routes are then not installed (nodes/live_server.install)
            pass

    def send_progress_text(self, text, node_id, sid=None) -> None:
        TEXTS.append((str(node_id), str(text)))

    def send_sync(self, event, data, sid=None) -> None:
        EVENTS.append((str(event), data))
        for hook in list(HOOKS):
            hook(str(event), data)


PromptServer.instance = PromptServer()
