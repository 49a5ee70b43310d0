"""The SDVG_STATE value passed between nodes, and the id of the ComfyUI execution that computes a block."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..sdvg_core.engine.state import GenerationState

if TYPE_CHECKING:
    from .session import Session

_FALLBACK_RUN_ID = uuid.uuid4().hex


def current_run_id() -> str:
    """The id of the ComfyUI execution running now (its prompt id): every block a node computes is stamped with it,
    so SDVG Finish can tell blocks computed by this queue press from blocks taken from ComfyUI's node cache (an
    earlier press). Outside an execution (no context): one id per process."""
    try:
        from comfy_execution.utils import get_executing_context
    except ImportError:
        return _FALLBACK_RUN_ID
    ctx = get_executing_context()
    pid = (getattr(ctx, "prompt_id", None) or getattr(ctx, "task_id", None)) if ctx is not None else None  # pip 0.12: task_id
    return str(pid) if pid else _FALLBACK_RUN_ID


def node_run_id() -> str:
    """The run id of a generation made inside one node (SDVG Generate): the execution's id and the node's, so what
    this node takes from another node's generation in the same execution counts as reused, not as its own work."""
    try:
        from comfy_execution.utils import get_executing_context
    except ImportError:
        return current_run_id()
    ctx = get_executing_context()
    node = getattr(ctx, "node_id", None) if ctx is not None else None
    return f"{current_run_id()}#{node}" if node is not None else current_run_id()


@dataclass(frozen=True)
class Run(tuple):
    """The SDVG_STATE value passed between nodes: the session plus an immutable GenerationState.

    As a tuple it is (state, the draft's decoded frames when it has them): ComfyUI's RAM-pressure output cache
    (0.33, `--cache-ram`) sizes a node output by the tensors it finds in lists and tuples, so the one large tensor a
    state holds outside the shared memo is counted for its bytes there (models and memo entries are ComfyUI's model
    management's; committed latents are memo entries every later state shares). The state comes first because that
    cache keeps, while its prompt runs, an output in which nothing lacks `is_dynamic()`: an empty tuple would be one."""

    session: "Session"
    state: GenerationState
    tau: float | None = None  # the tau of the last routing decision (for the report plot)
    policy: str = ""  # description of the routing policy used

    def __new__(cls, session: "Session", state: GenerationState, tau: float | None = None, policy: str = ""):
        frames = state.pending.frames if state.pending is not None else None
        return super().__new__(cls, (state,) if frames is None else (state, frames))

    def with_state(self, state: GenerationState, **kw: Any) -> "Run":
        return Run(self.session, state, kw.get("tau", self.tau), kw.get("policy", self.policy))
