"""Fake of comfy_execution.utils: the executing context (prompt id, node id) that ComfyUI sets around each node."""
from __future__ import annotations

import contextvars
from typing import NamedTuple, Optional


class ExecutionContext(NamedTuple):
    prompt_id: str
    node_id: str
    list_index: Optional[int]


current_executing_context: contextvars.ContextVar[Optional[ExecutionContext]] = contextvars.ContextVar(
    "current_executing_context", default=None)


def get_executing_context() -> Optional[ExecutionContext]:
    return current_executing_context.get(None)


class CurrentNodeContext:
    def __init__(self, prompt_id: str, node_id: str, list_index: Optional[int] = None):
        self.context, self.token = ExecutionContext(prompt_id, node_id, list_index), None

    def __enter__(self):
        self.token = current_executing_context.set(self.context)
        return self

    def __exit__(self, *exc):
        current_executing_context.reset(self.token)
