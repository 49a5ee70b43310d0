"""Fake of ComfyUI's `server` module: PromptServer.instance with send_progress_text (text drawn on a node, newer
frontends), recording (node id, text)."""
from __future__ import annotations

TEXTS: list[tuple[str, str]] = []


class PromptServer:
    instance = None

    def send_progress_text(self, text, node_id, sid=None) -> None:
        TEXTS.append((str(node_id), str(text)))


PromptServer.instance = PromptServer()
