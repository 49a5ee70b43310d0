"""Fake of ComfyUI's `server` module: PromptServer.instance with send_progress_text (text drawn on a node, newer
frontends), recording (node id, text), and send_sync (a websocket event to every page), recording (event, data) and
calling the hooks a test adds (on the sender's thread, as a page's answer would arrive between two blocks)."""
from __future__ import annotations

TEXTS: list[tuple[str, str]] = []
EVENTS: list[tuple[str, dict]] = []
HOOKS: list = []  # callables (event, data): a test's stand-in for a page that answers events


class PromptServer:
    instance = None

    def send_progress_text(self, text, node_id, sid=None) -> None:
        TEXTS.append((str(node_id), str(text)))

    def send_sync(self, event, data, sid=None) -> None:
        EVENTS.append((event, data))
        for hook in list(HOOKS):
            hook(event, data)


PromptServer.instance = PromptServer()
